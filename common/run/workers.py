"""A launcher for frameworks that have none of their own (TensorFlow's ``tf-config``, JAX's
``jax-distributed``): one supervising process starts one ``python -m parbench.run.worker``
process per device of this node, each told its global index in the environment, and supervises
them. The supervisor never imports the framework: it only waits.

A worker that dies leaves its peers blocked in a collective, so the first worker to fail takes
the others down with it; each worker's end is written to the run's folder as soon as it is seen
(parbench.run.process.write_exit), so the record names the rank that died first.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from parbench.run.job import Job
from parbench.run.process import how, write_exit

WORKER_ENV = "PARBENCH_WORKER_INDEX"  # the worker's global index; absent in the supervisor
POLL_S = 0.1


def worker_index() -> int | None:
    """This process's global worker index, or None in the supervising process."""
    value = os.environ.get(WORKER_ENV)
    return None if value is None else int(value)


def _stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        if process.poll() is None:
            process.kill()
    for process in processes:
        process.wait()


def supervise(processes: list[subprocess.Popen], indices: list[int], workdir: Path,
              launcher: str) -> None:
    """Return once every worker exited 0; raise at the first failure, the others killed.
    Each worker's end is reported in ``workdir`` (see parbench.launch.exits) as soon as it is
    seen."""
    reported: set[int] = set()
    try:
        while True:
            for index, process in zip(indices, processes):
                code = process.poll()
                if code is None or index in reported:
                    continue
                write_exit(workdir, index, process.pid, code)
                reported.add(index)
                if code != 0:
                    raise RuntimeError(f"{launcher}: worker {index} {how(code)}; "
                                       "stopped the others")
            if len(reported) == len(processes):
                return
            time.sleep(POLL_S)
    finally:
        _stop(processes)


def run(job: Job, launcher: str, framework_env: Callable[[int], dict[str, str]]) -> None:
    """Start this node's workers (global indices from ``job.first_rank`` on), each with
    ``framework_env(index)`` added to this process's environment, and wait for them;
    RuntimeError if one fails."""
    local = range(job.first_rank, job.first_rank + job.world_size // job.nnodes)
    command = [sys.executable, "-m", "parbench.run.worker", str(job.path / "job.json")]
    processes = []
    try:
        for index in local:
            env = {**os.environ, **framework_env(index), WORKER_ENV: str(index)}
            processes.append(subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL))
    except BaseException:
        _stop(processes)
        raise
    supervise(processes, list(local), job.path, launcher)
