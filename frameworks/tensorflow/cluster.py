"""The ``tf-config`` launcher: starts one ``python -m parbench.run.worker`` process per worker, each
with its ``TF_CONFIG``, and supervises them. It never imports TensorFlow (10 s and hundreds of
MiB for a process that only waits).

TensorFlow has no launcher of its own: each worker reads the cluster (``127.0.0.1:PORT`` of every
worker) and its own index from ``TF_CONFIG``. A worker that dies leaves its peers blocked in a
collective, so the first worker to fail takes the others down with it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from parbench.base.ports import LOCALHOST, free_port
from parbench.run.job import Job
from parbench.run.process import how, write_exit

WORKER_ENV = "PARBENCH_TF_WORKER"  # the worker's index; absent in the supervising process
POLL_S = 0.1


def worker_index() -> int | None:
    """This process's worker index, or None in the supervising process."""
    value = os.environ.get(WORKER_ENV)
    return None if value is None else int(value)


def _env(job: Job, index: int, workers: list[str]) -> dict[str, str]:
    env = dict(os.environ)
    env[WORKER_ENV] = str(index)
    env["TF_CONFIG"] = json.dumps({"cluster": {"worker": workers},
                                   "task": {"type": "worker", "index": index}})
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "0" if job.verbose else "2")
    return env


def _stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        if process.poll() is None:
            process.kill()
    for process in processes:
        process.wait()


def supervise(processes: list[subprocess.Popen], indices: list[int], workdir: Path) -> None:
    """Return once every worker exited 0; raise at the first failure, the others killed.
    Each worker's end is reported in ``workdir`` (see parbench.launch.exits) as soon as it is seen."""
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
                    raise RuntimeError(f"tf-config: worker {index} {how(code)}; "
                                       "stopped the others")
            if len(reported) == len(processes):
                return
            time.sleep(POLL_S)
    finally:
        _stop(processes)


def run(job: Job) -> None:
    """Start this node's workers and wait for them; RuntimeError if one fails. On one node the
    workers listen on free loopback ports; on several, ``job.cluster`` lists every node's
    workers (gathered by parbench's check-in, see parbench.launch.checkin) and this node starts its
    own: global indices from ``job.first_rank`` on."""
    workers = job.cluster or [f"{LOCALHOST}:{free_port()}" for _ in range(job.world_size)]
    local = range(job.first_rank, job.first_rank + job.world_size // job.nnodes)
    command = [sys.executable, "-m", "parbench.run.worker", str(job.path / "job.json")]
    processes = []
    try:
        for index in local:
            processes.append(subprocess.Popen(command, env=_env(job, index, workers),
                                              stdin=subprocess.DEVNULL))
    except BaseException:
        _stop(processes)
        raise
    supervise(processes, list(local), job.path)
