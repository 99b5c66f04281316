"""The data-parallel example with a BatchNorm whose batch statistics are taken over the global
batch, across the processes (nn.SyncBatchNorm under DistributedDataParallel, NCCL between the
GPUs): the synchronized-BatchNorm step of the porting examples. On N processes each sees 1/N of
the batch, so a plain BatchNorm normalises each part with that part's statistics; synchronized,
they are the whole batch's, and the losses are one device's (syncbn_tf.py --devices 1 prints
them).

It needs DEVICES GPUs and refuses elsewhere: SyncBatchNorm works on GPU modules only (torch
2.13 raises "SyncBatchNorm layers only work with GPU modules" on the CPU).

    python examples/syncbn_torch.py [--steps 20]
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from data import BN_EPSILON, DEVICES, HIDDEN, LR, initial_weights
from dp_torch import free_port, train_loop
from single_torch import Classifier


# --- model: a BatchNorm between the hidden layer and its ReLU (torch's epsilon is 1e-5);
# convert_sync_batchnorm swaps every BatchNorm for a SyncBatchNorm before DDP wraps the model
class NormalizedClassifier(Classifier):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.BatchNorm1d(HIDDEN, eps=BN_EPSILON)

    def forward(self, x):
        return self.head(torch.relu(self.norm(self.hidden(x))))


def normalized_classifier():
    model = NormalizedClassifier()
    state = model.state_dict()  # the BatchNorm's own: scale 1, shift 0, running statistics
    state.update({k: torch.from_numpy(v) for k, v in initial_weights().items()})
    model.load_state_dict(state)
    return model


def synchronized_classifier(device):
    model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(normalized_classifier()).to(device)
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index])


# --- the loop each process runs: one GPU each, NCCL between them
def worker(rank, port, steps):
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=DEVICES)
    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    model = synchronized_classifier(device)
    train_loop(model, torch.optim.SGD(model.parameters(), lr=LR), rank, steps, device)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description="synchronized BatchNorm, PyTorch DDP")
    parser.add_argument("--steps", type=int, default=20)
    steps = parser.parse_args().steps
    if steps < 1:
        parser.error(f"--steps must be at least 1, got {steps}")
    gpus = torch.cuda.device_count()
    if gpus < DEVICES:
        parser.exit(2, f"syncbn_torch.py: {gpus} GPUs here, {DEVICES} needed: SyncBatchNorm "
                       "works on GPU modules only\n")
    os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")  # the rendezvous is on 127.0.0.1
    mp.spawn(worker, args=(free_port(), steps), nprocs=DEVICES)  # raises if a process fails


if __name__ == "__main__":
    main()
