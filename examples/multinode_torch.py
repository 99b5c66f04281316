"""The data-parallel example across machines with PyTorch, started by ``torchrun`` on each: the
third step of the porting examples. dp_torch.py started its processes itself; here torchrun
does, one per device of each machine, and hands each its rank through the environment
(``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``), which ``init_process_group``
reads. The training is dp_torch.py's, so the losses printed are single_torch.py's.

On each of 2 machines (node 0's address as --master-addr; here both on this one):

    torchrun --nnodes 2 --node-rank 0 --nproc-per-node 1 --master-addr 127.0.0.1 \\
        --master-port 29500 examples/multinode_torch.py --steps 20
    torchrun --nnodes 2 --node-rank 1 --nproc-per-node 1 --master-addr 127.0.0.1 \\
        --master-port 29500 examples/multinode_torch.py --steps 20
"""

import argparse
import os

import torch.distributed as dist
from dp_torch import train


def main():
    parser = argparse.ArgumentParser(description="data-parallel training across machines, "
                                     "PyTorch DDP under torchrun")
    parser.add_argument("--steps", type=int, default=20)
    steps = parser.parse_args().steps
    if steps < 1:
        parser.error(f"--steps must be at least 1, got {steps}")
    if "RANK" not in os.environ:
        parser.error("start it with torchrun (see its docstring): RANK is not set")
    dist.init_process_group("gloo")  # env://: torchrun's variables
    train(dist.get_rank(), steps)


if __name__ == "__main__":
    main()
