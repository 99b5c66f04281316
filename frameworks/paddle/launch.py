"""paddle-launch: ``python -m paddle.distributed.launch`` starts this worker once per device.

The launcher writes each rank's output to ``workerlog.N`` in its log folder (the harness puts
error tails from there into the record) and, next to it, dumps of the whole environment, which
can hold secrets: ``envlog.N``, ``backup_env.N.json`` and, from the launcher's pod,
``<job id>.<pod name>.log``. Each rank deletes them as soon as its process group is up (rank
N's backup is read lazily by Paddle until then).
"""

from __future__ import annotations

import os
from pathlib import Path

from parbench.run.job import Job
from parbench.run.loop import run_worker

from .data_parallel import DataParallelStrategy

WORKER_LOG = "workerlog."  # the launcher's per-rank output files: kept


def remove_environment_dumps(log_dir: Path, local_rank: int) -> None:
    """Delete this rank's environment dumps (named by its rank on this node); the node's first
    rank also the pod's (written before any rank)."""
    dumps = [log_dir / f"envlog.{local_rank}", log_dir / f"backup_env.{local_rank}.json"]
    if local_rank == 0:
        dumps += [p for p in log_dir.glob("*.log") if not p.name.startswith(WORKER_LOG)]
    for path in dumps:
        path.unlink(missing_ok=True)


def build(job: Job, strategy_class: type[DataParallelStrategy] = DataParallelStrategy
          ) -> DataParallelStrategy:
    """The strategy (paddle-launch's, or another started by the same launcher), then this
    rank's dumps deleted: its process group is up, so Paddle no longer reads them."""
    strategy = strategy_class(job)
    remove_environment_dumps(Path(os.environ["PADDLE_LOG_DIR"]),
                             int(os.environ["PADDLE_LOCAL_RANK"]))
    return strategy


def main(job: Job) -> None:
    run_worker(job, build)
