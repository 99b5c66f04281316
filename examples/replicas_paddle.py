"""Random numbers on each of DEVICES processes with Paddle (``paddle.distributed.spawn``, gloo
on the CPU): the per-replica step of the porting examples. A dropout mask must differ from one
replica to the next, since each replica drops units of other rows; Paddle's generator, seeded
alike in every process, draws the same numbers in every process. The script draws each
process's mask for its rows of a batch twice, after paddle.seed(seed) and after
paddle.seed(seed + rank), and prints whether the processes' masks are equal.

    python examples/replicas_paddle.py
"""

import argparse

import paddle
import paddle.distributed as dist
from data import BATCH, DEVICES, DROPOUT, HIDDEN

SEED = 0


# --- random numbers: paddle.seed sets the process's global generator (the one dropout uses)
def dropout_mask(seed):
    paddle.seed(seed)
    keep = paddle.rand([BATCH // DEVICES, HIDDEN]) >= DROPOUT
    return keep.astype("float32") / (1 - DROPOUT)


def masks_equal(mask):
    """Whether every process drew the same mask (all-gathered, compared on each)."""
    masks = []
    dist.all_gather(masks, mask)
    return all(bool(paddle.equal_all(masks[0], other)) for other in masks[1:])


def worker():
    paddle.set_device("cpu")
    dist.init_parallel_env()
    rank = dist.get_rank()
    alike = masks_equal(dropout_mask(SEED))
    per_rank = masks_equal(dropout_mask(SEED + rank))
    if rank == 0:
        print(f"devices {dist.get_world_size()}\none seed: masks equal {alike}\n"
              f"seed + rank: masks equal {per_rank}", flush=True)


def main():
    argparse.ArgumentParser(description="random numbers per replica, Paddle").parse_args()
    dist.spawn(worker, nprocs=DEVICES)  # raises if a process fails


if __name__ == "__main__":
    main()
