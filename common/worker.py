"""Entry point of every worker process: ``python -m parbench.worker JOB.json``.

Launchers (torchrun, paddle.distributed.launch, or the harness itself) start this module; it
imports the one backend the job names and hands over to that strategy file's ``main``.
"""

from __future__ import annotations

import os
import sys

# Absolute imports: paddle.distributed.launch runs this file as a script.
from parbench.backends import get_backend
from parbench.job import Job, write_error


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    job = Job.load(args[0])
    try:
        get_backend(job.backend).load().main(job)
    except BaseException:
        write_error(job, f"process {os.getpid()}")
        raise


if __name__ == "__main__":
    main()
