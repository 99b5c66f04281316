"""`parbench slurm` scripts submitted to a real two-node Slurm cluster (tests/slurm_cluster.py:
Debian's slurmctld, two slurmd and munged in private namespaces): each backend's job runs to
completion and its record equals the two-node loopback run of the same configuration; scancel,
and a node's task killed mid-run, end every process on every node with nothing half-written.
Skipped, with the reason, without root or the Slurm packages (.ci/run installs them)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from loopback_nodes import TRAINING, assert_same_training, loopback_run
from slurm_cluster import KILL_WAIT_S, Cluster, unavailable

from conftest import needs, records_in

pytestmark = pytest.mark.slow
ENDED_WITHIN_S = KILL_WAIT_S + 20  # Slurm's SIGTERM, its SIGKILL KillWait later, and slack
LONG_RUN = ("--devices", "1", "--dataset", "digits", "--global-batch", "32", "--model", "mlp",
            "--threads", "1", "--steps", "400", "--checkpoint-every", "50",
            "--checkpoint-dir", "ck")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    started = Cluster.start(tmp_path_factory.mktemp("slurm-cluster"))
    yield started
    started.stop()


def job_script(folder: Path, backend: str, port: int, *run_options: str) -> Path:
    """The script `parbench slurm` prints, saved as a user would save it."""
    folder.mkdir(parents=True, exist_ok=True)
    printed = subprocess.run([sys.executable, "-m", "parbench.cli", "slurm", backend, "--nodes",
                              "2", "--master-port", str(port), *run_options, "--out", "out"],
                             capture_output=True, text=True, timeout=60)
    assert printed.returncode == 0, printed.stderr
    script = folder / "job.sh"
    script.write_text(printed.stdout)
    return script


def wait_for(path: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear within {timeout} s"
        time.sleep(0.05)


def assert_nothing_left(cluster: Cluster) -> None:
    """No process of the job on either node, and both nodes idle again: a process Slurm could
    not end would have drained its node."""
    deadline = time.monotonic() + ENDED_WITHIN_S
    while (cluster.job_processes() or set(cluster.node_states()) != {"idle"}) \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    assert cluster.job_processes() == [], f"still running {ENDED_WITHIN_S} s after the job"
    assert set(cluster.node_states()) == {"idle"}, cluster.node_states()


def assert_nothing_half_written(folder: Path) -> None:
    """Every record whole, and every visible checkpoint a complete one (its manifest, written
    last, names as many losses as its step); an interrupted writer's folder is hidden."""
    assert all(p.suffix == ".json" for p in (folder / "out").iterdir())
    records_in(folder / "out")  # each parses
    for step in (folder / "ck").glob("step-*"):
        manifest = json.loads((step / "parbench.json").read_text())
        assert len(manifest["losses"]) == int(step.name.removeprefix("step-"))


def submit_and_wait_for_checkpoint(cluster: Cluster, folder: Path, port: int) -> str:
    script = job_script(folder, "torch-ddp", port, *LONG_RUN)
    done = cluster.run("sbatch", "--parsable", script.name, cwd=folder)
    assert done.returncode == 0, done.stderr
    wait_for(folder / "ck" / "step-50")
    return done.stdout.strip()


@pytest.mark.parametrize("backend", [
    pytest.param("torch-ddp", marks=needs("torch")),
    pytest.param("tf-multiworker", marks=needs("tensorflow")),
    pytest.param("paddle-launch", marks=needs("paddle")),
    pytest.param("jax-multiprocess", marks=needs("jax"))])
def test_each_backend_runs_to_completion_as_on_loopback(cluster, tmp_path, tmp_path_factory,
                                                        backend):
    script = job_script(tmp_path, backend, 29500, "--devices", "1", *TRAINING)
    job = cluster.submit(script)
    output = next(tmp_path.glob("parbench-*.out")).read_text()
    assert (job["JobState"], job["ExitCode"]) == ("COMPLETED", "0:0"), output[-3000:]
    (record,) = records_in(tmp_path / "out")  # node 0's, the only one
    assert record["config"]["master"] == "node1:29500"  # the first host of the nodelist
    assert "node 1, repeat 0: ok" in output  # node 1 printed its part into the job's output
    (reference,) = loopback_run(tmp_path_factory, backend)["records"][0]
    assert_same_training(record, reference)
    assert_nothing_left(cluster)


@needs("torch")
def test_scancel_ends_every_node_and_the_job_resumes_from_its_checkpoint(cluster, tmp_path):
    job = submit_and_wait_for_checkpoint(cluster, tmp_path, 29510)
    assert cluster.run("scancel", job, cwd=tmp_path).returncode == 0
    assert_nothing_left(cluster)
    assert_nothing_half_written(tmp_path)
    (first,) = records_in(tmp_path / "out")
    stopped = first["steps"]
    assert first["status"] == "preempted" and 50 <= stopped < 400, first["error"]
    assert f"preempted by SIGTERM after step {stopped}" in first["error"]

    (tmp_path / "out").rename(tmp_path / "first")
    script = job_script(tmp_path, "torch-ddp", 29520, *LONG_RUN, "--resume-from", "ck")
    again = cluster.submit(script)
    assert again["JobState"] == "COMPLETED", again
    (second,) = records_in(tmp_path / "out")
    assert second["status"] == "ok" and second["steps"] == 400 - stopped
    assert (second["resumed"]["run_id"], second["resumed"]["step"]) == (first["run_id"], stopped)
    assert_nothing_left(cluster)


@needs("torch")
def test_a_task_killed_on_node_2_ends_the_job_on_both_nodes(cluster, tmp_path):
    job = submit_and_wait_for_checkpoint(cluster, tmp_path, 29530)
    (task,) = [pid for pid, command in cluster.job_processes()
               if "parbench run" in command and environ_of(pid).get("SLURM_NODEID") == "1"]
    os.kill(task, signal.SIGKILL)
    assert_nothing_left(cluster)
    deadline = time.monotonic() + 60
    while cluster.job(job)["JobState"] in ("RUNNING", "COMPLETING"):
        assert time.monotonic() < deadline, "the job outlived its tasks"
        time.sleep(0.2)
    assert cluster.job(job)["JobState"] == "FAILED"
    assert_nothing_half_written(tmp_path)
    (record,) = records_in(tmp_path / "out")
    assert record["status"] == "failed"
    assert record["error"].startswith("node 1 (") and "left the run" in record["error"], \
        record["error"]


def environ_of(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0")
                if "=" in item)
