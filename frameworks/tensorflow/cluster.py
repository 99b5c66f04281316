"""The ``tf-config`` launcher: TensorFlow has no launcher of its own, so parbench's
(parbench.run.workers) starts one worker process per device, each reading the cluster
(``127.0.0.1:PORT`` of every worker) and its own index from ``TF_CONFIG``. It never imports
TensorFlow (10 s and hundreds of MiB for a process that only waits).
"""

from __future__ import annotations

import json
import os
from functools import partial

from parbench.base.ports import LOCALHOST, free_port
from parbench.run import workers
from parbench.run.job import Job

LAUNCHER = "tf-config"


def _env(job: Job, addresses: list[str], index: int) -> dict[str, str]:
    env = {"TF_CONFIG": json.dumps({"cluster": {"worker": addresses},
                                    "task": {"type": "worker", "index": index}})}
    env["TF_CPP_MIN_LOG_LEVEL"] = os.environ.get("TF_CPP_MIN_LOG_LEVEL",
                                                 "0" if job.verbose else "2")
    return env


def run(job: Job) -> None:
    """Start this node's workers and wait for them; RuntimeError if one fails. On one node the
    workers listen on free loopback ports; on several, ``job.cluster`` lists every node's
    workers (gathered by parbench's check-in, see parbench.launch.checkin)."""
    addresses = job.cluster or [f"{LOCALHOST}:{free_port()}" for _ in range(job.world_size)]
    workers.run(job, LAUNCHER, partial(_env, job, addresses))
