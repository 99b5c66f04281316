"""Entry point of every worker process: ``python -m parbench.run.worker JOB.json``.

Launchers (torchrun, paddle.distributed.launch, or the harness itself) start this module; it
imports the one backend the job names and hands over to that strategy file's ``main``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# Absolute imports: paddle.distributed.launch runs this file as a script.
from parbench.run.job import Job, write_error
from parbench.run.process import die_with_parent, exit_finished, fork_watcher
from parbench.run.registry import get_backend

# Set by the launchers that start this module once per rank and keep each rank's exit status
# to themselves (torchrun, paddle.distributed.launch); the harness strips them from the
# user's environment, so here they can only come from the launcher.
RANK_VARIABLES = ("RANK", "PADDLE_TRAINER_ID")


def launcher_rank() -> int | None:
    for name in RANK_VARIABLES:
        if name in os.environ:
            return int(os.environ[name])
    return None


def main(argv: list[str] | None = None) -> None:
    job_path = (sys.argv[1:] if argv is None else argv)[0]
    die_with_parent()  # a launcher that dies takes its workers with it
    rank = launcher_rank()
    if rank is not None:
        fork_watcher(rank, Path(job_path).parent)  # only the child returns: it trains
    run(job_path)


def run(job_path: str) -> None:
    job = Job.load(job_path)
    try:
        get_backend(job.backend).load().main(job)
    except BaseException:
        write_error(job, f"process {os.getpid()}")
        raise
    exit_finished()


if __name__ == "__main__":
    main()
