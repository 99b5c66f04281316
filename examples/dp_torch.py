"""The one-device example on DEVICES processes with PyTorch's DistributedDataParallel (gloo, on
the CPU): the second step of the porting examples. Each process trains on its part of every
global batch; DDP averages the gradients, so every step is the one-device step, and the losses
printed (the mean of the processes' losses: the global batch's) are single_torch.py's.

    python examples/dp_torch.py [--steps 20]
"""

import argparse
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from data import DEVICES, LR, batches, initial_weights, make_data, shard
from single_torch import Classifier, train_step


# --- setup: one process per device, meeting on a free port of 127.0.0.1
def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# --- the loop each process runs
def worker(rank, port, steps):
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"  # gloo's own traffic on loopback too
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=DEVICES)
    train(rank, steps)


def train(rank, steps):
    """The training of one process of a process group already initialised."""
    torch.set_num_threads(1)  # the processes share the cores
    model = Classifier()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in initial_weights().items()})
    model = torch.nn.parallel.DistributedDataParallel(model)  # broadcasts rank 0's weights
    train_loop(model, torch.optim.SGD(model.parameters(), lr=LR), rank, steps)
    dist.destroy_process_group()


# --- data shard and step: each process its part of every global batch, the wrapped model's
# step on it; rank 0 prints the global batch's loss
def train_loop(model, optimizer, rank, steps, device=torch.device("cpu")):
    features, labels = make_data()
    world = dist.get_world_size()
    if rank == 0:
        print(f"devices {world}", flush=True)  # every process's one device
    for step, rows in enumerate(batches(steps)):
        mine = shard(rows, rank, world)
        x, y = (torch.from_numpy(array[mine]).to(device) for array in (features, labels))
        loss = torch.tensor(train_step(model, optimizer, x, y), device=device)
        dist.all_reduce(loss)  # the processes' mean losses, summed
        if rank == 0:
            print(f"step {step} loss {loss.item() / world:.7f}", flush=True)


def main():
    parser = argparse.ArgumentParser(description="data-parallel training, PyTorch DDP")
    parser.add_argument("--steps", type=int, default=20)
    steps = parser.parse_args().steps
    if steps < 1:
        parser.error(f"--steps must be at least 1, got {steps}")
    mp.spawn(worker, args=(free_port(), steps), nprocs=DEVICES)  # raises if a process fails


if __name__ == "__main__":
    main()
