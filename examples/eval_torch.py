"""Evaluation across DEVICES processes with PyTorch: the evaluation step of the porting examples.
Each process scores its contiguous part of a test set of 101 rows (50 and 51), and the counts
(right answers, summed loss, rows) are all-reduced: the scores are computed from the sums, so
they are one device's, whatever the split. Each version prints the same scores; here of the
initial weights, as the data-parallel scripts start.

    python examples/eval_torch.py
"""

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from data import DEVICES, initial_weights, test_data, test_part
from dp_torch import free_port
from single_torch import Classifier


# --- eval: sums, not means, cross the processes (a mean of the parts' means would weigh the
# 50 rows' part as much as the 51's)
def evaluate(model, x, y):
    with torch.no_grad():
        logits = model(x)
        return torch.tensor([(logits.argmax(1) == y).sum().item(),
                             torch.nn.functional.cross_entropy(logits, y, reduction="sum").item(),
                             len(y)], dtype=torch.float64)


def worker(rank, port):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=DEVICES)
    features, labels = test_data()
    model = Classifier()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in initial_weights().items()})
    part = test_part(rank)
    counts = evaluate(model, torch.from_numpy(features[part]), torch.from_numpy(labels[part]))
    dist.all_reduce(counts)
    if rank == 0:
        right, loss, rows = counts.tolist()
        print(f"accuracy {right / rows:.7f} loss {loss / rows:.7f} rows {rows:.0f}")
    dist.destroy_process_group()


def main():
    mp.spawn(worker, args=(free_port(),), nprocs=DEVICES)


if __name__ == "__main__":
    main()
