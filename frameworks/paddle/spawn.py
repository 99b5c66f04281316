"""paddle-spawn: ``paddle.distributed.spawn`` starts one DataParallel worker per device.

spawn picks free ports on 127.0.0.1 and hands each child its rank through the environment; when
one child fails it terminates the others and raises the child's traceback here.
"""

from __future__ import annotations

import paddle.distributed as dist

from parbench.job import Job
from parbench.loop import run_worker

from .data_parallel import DataParallelStrategy


def _train(job: Job) -> None:
    strategy = DataParallelStrategy(job)
    run_worker(job, strategy)
    strategy.teardown()


def main(job: Job) -> None:
    # backend "auto": NCCL when this Paddle build sees GPUs, gloo on CPU
    dist.spawn(_train, args=(job,), nprocs=job.world_size, join=True)
