"""Evaluation across DEVICES processes with Paddle: the evaluation step of the porting examples.
Each process scores its contiguous part of a test set of 101 rows (50 and 51), and the counts
(right answers, summed loss, rows) are all-reduced: the scores are computed from the sums, so
they are one device's, whatever the split. Each version prints the same scores; here of the
initial weights, as the data-parallel scripts start.

    python examples/eval_paddle.py
"""

import paddle
import paddle.distributed as dist
import paddle.nn.functional as F
from data import DEVICES, initial_weights, test_data, test_part
from single_paddle import Classifier, load


# --- eval: sums, not means, cross the processes (a mean of the parts' means would weigh the
# 50 rows' part as much as the 51's)
def evaluate(model, x, y):
    with paddle.no_grad():
        logits = model(x)
        right = float((logits.argmax(1) == y).astype("float64").sum())
        loss = float(F.cross_entropy(logits, y, reduction="sum"))
    return paddle.to_tensor([right, loss, float(len(y))], dtype="float64")


def worker():
    paddle.set_device("cpu")
    dist.init_parallel_env()
    features, labels = test_data()
    model = Classifier()
    load(model, initial_weights())
    part = test_part(dist.get_rank(), dist.get_world_size())
    counts = evaluate(model, paddle.to_tensor(features[part]), paddle.to_tensor(labels[part]))
    dist.all_reduce(counts)
    if dist.get_rank() == 0:
        right, loss, rows = counts.numpy().tolist()
        print(f"accuracy {right / rows:.7f} loss {loss / rows:.7f} rows {rows:.0f}", flush=True)


def main():
    dist.spawn(worker, nprocs=DEVICES)


if __name__ == "__main__":
    main()
