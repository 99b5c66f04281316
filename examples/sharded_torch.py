"""The data-parallel example with every parameter sharded over the DEVICES processes (FSDP2's
fully_shard, gloo on the CPU): the sharded step of the porting examples. Each process holds half
of each weight, of its gradient and of its optimizer state; a layer's weights are gathered whole
for its forward and backward, and each gradient is averaged and scattered back in shards. The
arithmetic is the one-device step's, so the losses printed are single_torch.py's; rank 0 prints
how many of the parameters it holds.

    python examples/sharded_torch.py [--steps 20]
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from data import DEVICES, LR, initial_weights
from dp_torch import free_port, train_loop
from single_torch import Classifier
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard


# --- setup: one process per device, and a mesh over them for the shards. On the CPU the mesh
# must be named: without one, fully_shard builds it on the GPU wherever CUDA is present
def worker(rank, port, steps):
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=DEVICES)
    train(rank, init_device_mesh("cpu", (DEVICES,)), steps)


# --- model: each unit (here the hidden layer, then the root with what is left) shards its
# parameters along their first dimension; load the whole weights first, then shard
def sharded_classifier(mesh):
    model = Classifier()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in initial_weights().items()})
    fully_shard(model.hidden, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def train(rank, mesh, steps):
    torch.set_num_threads(1)  # the processes share the cores
    model = sharded_classifier(mesh)
    held = sum(p.to_local().numel() for p in model.parameters())
    whole = sum(p.numel() for p in model.parameters())
    if rank == 0:
        print(f"parameters held {held} of {whole}", flush=True)
    # the optimizer is built on the shards; the loop is dp_torch.py's
    train_loop(model, torch.optim.SGD(model.parameters(), lr=LR), rank, steps)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description="sharded data parallelism, PyTorch FSDP2")
    parser.add_argument("--steps", type=int, default=20)
    steps = parser.parse_args().steps
    if steps < 1:
        parser.error(f"--steps must be at least 1, got {steps}")
    mp.spawn(worker, args=(free_port(), steps), nprocs=DEVICES)  # raises if a process fails


if __name__ == "__main__":
    main()
