"""The default thread rule (threads per worker = max(1, cores // processes)) on core counts
other than this machine's, and --threads overriding it.

A run counts the cores in its CPU affinity, so `taskset` gives it fewer cores than the
machine has; the rest of the suite only ever sees the cores pytest was started with.
"""

from __future__ import annotations

import os
import shutil

import pytest

from conftest import needs, parbench, records_in
from parbench.base.devices import gpu_count

pytestmark = pytest.mark.skipif(shutil.which("taskset") is None,
                                reason="taskset (util-linux) is needed to vary the cores seen")

RUN = ["--steps", "2", "--global-batch", "16"]
CORES = sorted(os.sched_getaffinity(0))


def pinned(count: int) -> tuple[str, ...]:
    """A command prefix that lets a run see only ``count`` of this process's cores."""
    if len(CORES) < count:
        pytest.skip(f"needs {count} cores, this process may use {len(CORES)}")
    return ("taskset", "-c", ",".join(map(str, CORES[:count])))


def run_record(tmp_path, backend: str, cores: int, *options: str) -> dict:
    """The one record of a short ``backend`` run that sees ``cores`` cores."""
    result = parbench("run", backend, *RUN, *options, "--out", str(tmp_path / "out"),
                      prefix=pinned(cores), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (record,) = records_in(tmp_path / "out")
    assert record["status"] == "ok", record["error"]
    assert record["env"]["cores"] == cores  # the run saw the affinity, not the machine
    return record


# (cores seen, --threads or None, expected threads per worker). With --threads the expected
# figure differs from the default on the same cores, so an ignored option would show.
DEFAULT, EXPLICIT = (1, None, 1), (1, "3", 3)


@pytest.mark.slow
@needs("torch")
@pytest.mark.parametrize("cores,threads,expected", [DEFAULT, EXPLICIT])
def test_one_process_gets_every_core_it_sees(tmp_path, cores, threads, expected):
    options = ["--threads", threads] if threads else []
    record = run_record(tmp_path, "torch-single", cores, *options)
    assert record["env"]["threads_per_worker"] == expected


@pytest.mark.slow
@needs("paddle")
@pytest.mark.parametrize("cores,threads,expected", [DEFAULT, EXPLICIT])
def test_paddle_workers_really_use_that_many_threads(tmp_path, cores, threads, expected):
    # Paddle's record reads the OpenMP thread count back inside the worker
    # (omp_get_max_threads): what the worker really uses, not just what was asked.
    options = ["--threads", threads] if threads else []
    record = run_record(tmp_path, "paddle-single", cores, "--dataset", "digits", *options)
    assert record["env"]["compute_threads"] == record["env"]["threads_per_worker"] == expected


DDP = ["--launcher", "spawn", "--devices", "2"]


@pytest.mark.slow
@needs("torch")
@pytest.mark.parametrize("threads,expected", [(None, 1), ("3", 3)])
def test_two_processes_share_the_cores_they_see(tmp_path, threads, expected):
    options = ["--threads", threads] if threads else []
    record = run_record(tmp_path, "torch-ddp", 2, *DDP, *options)
    assert record["world_size"] == 2 and record["env"]["threads_per_worker"] == expected


@needs("torch")
@pytest.mark.skipif(gpu_count() > 0, reason="with GPUs, devices are GPUs, not cores")
def test_two_devices_on_one_core_are_refused(tmp_path):
    # one core cannot host two CPU devices: refused before anything starts, --threads or not
    result = parbench("run", "torch-ddp", *RUN, *DDP, "--threads", "3", "--out",
                      str(tmp_path), prefix=pinned(1))
    assert result.returncode == 2
    assert "--devices 2 but this machine has 1" in result.stderr
    assert not any(tmp_path.iterdir())
