"""paddle-spawn: ``paddle.distributed.spawn`` starts one DataParallel worker per device.

spawn picks free ports on 127.0.0.1 and hands each child its rank through the environment; when
one child fails it terminates the others and raises the child's traceback here.
"""

from __future__ import annotations

import paddle.distributed as dist

from parbench.run.job import Job
from parbench.run.loop import run_worker
from parbench.run.process import die_with_parent, exit_finished, watch_spawned

from .data_parallel import DataParallelStrategy


def _train(job: Job) -> None:
    die_with_parent()  # spawn's children would outlive a killed parent
    run_worker(job, DataParallelStrategy)
    exit_finished()  # a finished rank must not die in interpreter finalization


def main(job: Job) -> None:
    # backend "auto": NCCL when this Paddle build sees GPUs, gloo on CPU
    spawned = dist.spawn(_train, args=(job,), nprocs=job.world_size, join=False)
    watch_spawned(spawned.processes, job.path)  # says which rank died first, and how
    while not spawned.join():  # stops the others and raises if a rank failed
        pass
