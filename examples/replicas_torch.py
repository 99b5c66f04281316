"""Random numbers on each of DEVICES processes with PyTorch (DDP's processes, gloo on the CPU):
the per-replica step of the porting examples. A dropout mask must differ from one replica to
the next, since each replica drops units of other rows; torch's generator, seeded alike in
every process, draws the same numbers in every process. The script draws each process's mask
for its rows of a batch twice, with one seed everywhere and with the seed plus the rank, and
prints whether the processes' masks are equal.

    python examples/replicas_torch.py
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from data import BATCH, DEVICES, DROPOUT, HIDDEN
from dp_torch import free_port

SEED = 0


# --- random numbers: a generator of the process's own, seeded by the seed and the rank
def dropout_mask(generator):
    keep = torch.rand(BATCH // DEVICES, HIDDEN, generator=generator) >= DROPOUT
    return keep / (1 - DROPOUT)


def masks_equal(mask):
    """Whether every process drew the same mask (all-gathered, compared on each)."""
    masks = [torch.empty_like(mask) for _ in range(dist.get_world_size())]
    dist.all_gather(masks, mask)
    return all(torch.equal(masks[0], other) for other in masks[1:])


def worker(rank, port):
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=DEVICES)
    alike = masks_equal(dropout_mask(torch.Generator().manual_seed(SEED)))
    per_rank = masks_equal(dropout_mask(torch.Generator().manual_seed(SEED + rank)))
    if rank == 0:
        print(f"devices {DEVICES}\none seed: masks equal {alike}\n"
              f"seed + rank: masks equal {per_rank}", flush=True)
    dist.destroy_process_group()


def main():
    argparse.ArgumentParser(description="random numbers per replica, PyTorch DDP").parse_args()
    mp.spawn(worker, args=(free_port(),), nprocs=DEVICES)  # raises if a process fails


if __name__ == "__main__":
    main()
