"""Nothing left running, nothing left behind: every process of a run ends with it, however the
run or parbench itself ends (SIGTERM, a timeout, a frozen worker, parbench SIGKILLed), the
temporary folders go with it, and the record names which rank died first and how.

Each test gives parbench a private TMPDIR. Every process of the run inherits it, so the run's
processes are exactly those whose environment holds it, found with psutil whatever their parent
or session is now (an orphaned worker included)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from conftest import needs, parbench, records_in

pytestmark = pytest.mark.slow
# Faults strike at step 2 or 3, long before a run ends: the cheapest model will do
TINY = ["--global-batch", "32", "--devices", "2", "--model", "mlp"]


def processes_of(tmpdir: Path) -> list[psutil.Process]:
    """Live (non-zombie) processes started with TMPDIR=tmpdir."""
    found = []
    for process in psutil.process_iter():
        try:
            if (process.environ().get("TMPDIR") == str(tmpdir)
                    and process.status() != psutil.STATUS_ZOMBIE):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def wait_for(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"waited {seconds} s for {what}"
        time.sleep(0.2)


def start(tmpdir: Path, *args: str, fault: str | None = None) -> subprocess.Popen:
    """parbench ARGS in the background, as from a terminal (SIGINT not ignored)."""
    tmpdir.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(tmpdir)}
    if fault:
        env["PARBENCH_TEST_FAULT"] = fault
    return subprocess.Popen([sys.executable, "-m", "parbench.cli", *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def training(tmpdir: Path) -> bool:
    """Rank 0 has finished a step (it writes progress.json in the run's temporary folder)."""
    return any(tmpdir.glob("parbench-run-*/progress.json"))


def assert_nothing_left(tmpdir: Path, seconds: float) -> None:
    wait_for(lambda: not processes_of(tmpdir), seconds, "the run's processes to end")
    assert not list(tmpdir.glob("parbench-*")), list(tmpdir.iterdir())


@needs("torch")
@pytest.mark.parametrize("moment", ["mid-run", "mid-hang"])
def test_sigterm_to_compare_ends_every_process_and_resume_completes(tmp_path, moment):
    out, tmpdir = tmp_path / "runs", tmp_path / "tmp"
    # mid-run: 60 steps of the resnet (~0.1 s each here) leave the SIGTERM a wide window in
    # the second repeat; mid-hang: the hang is the window, and the mlp makes the resume short
    model = "resnet" if moment == "mid-run" else "mlp"
    sweep = ["compare", "torch-ddp", "--devices", "2", "--repeats", "2", "--steps", "60",
             "--model", model, "--global-batch", "32", "--out", str(out), "--report-dir",
             str(tmp_path / "rep")]
    if moment == "mid-run":  # SIGTERM while the second repeat trains
        compare = start(tmpdir, *sweep)
        wait_for(lambda: list(out.glob("*.json")), 300, "the first record")
    else:  # SIGTERM while rank 0 of the first repeat hangs at step 3
        compare = start(tmpdir, *sweep, fault="hang:0:3")
    wait_for(lambda: training(tmpdir), 120, "a run to train")
    assert len(processes_of(tmpdir)) >= 3  # parbench, torchrun and the workers are up
    compare.send_signal(signal.SIGTERM)
    assert compare.wait(timeout=10) == 128 + signal.SIGTERM, compare.stderr.read()
    assert "SIGTERM" in compare.stderr.read()
    assert_nothing_left(tmpdir, 10)
    kept = records_in(out) if out.is_dir() else []
    assert len(kept) == (1 if moment == "mid-run" else 0)
    assert all(r["status"] == "ok" for r in kept)

    resumed = parbench(*sweep, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stderr.count("kept (an ok record exists)") == len(kept)
    assert sorted(r["repeat"] for r in records_in(out)) == [0, 1]
    assert parbench("check", str(out)).returncode == 0


@pytest.mark.parametrize("backend,launcher", [
    pytest.param("torch-ddp", "torchrun", marks=needs("torch")),
    pytest.param("paddle-launch", "paddle-launch", marks=needs("paddle"))])
def test_frozen_worker_times_out_and_no_worker_survives(tmp_path, backend, launcher):
    """torchrun and paddle's launcher start each worker in a session of its own, out of reach
    of a process-group kill: the record says timeout and nothing of the run is left."""
    out, tmpdir = tmp_path / "runs", tmp_path / "tmp"
    run = start(tmpdir, "run", backend, "--launcher", launcher, *TINY, "--steps", "50",
                "--timeout", "12", "--out", str(out), fault="stop:1:2")
    assert run.wait(timeout=120) == 1, run.stderr.read()
    (record,) = records_in(out)
    assert record["status"] == "timeout" and record["error"].startswith("timed out after 12 s")
    assert_nothing_left(tmpdir, 5)


@needs("torch")
def test_sigkilled_parbench_takes_its_workers_along(tmp_path):
    """SIGKILL cannot be handled: the kernel ends the launcher and the workers (each asked to
    die with its parent), and the next parbench removes the temporary folders left behind."""
    tmpdir = tmp_path / "tmp"
    run = start(tmpdir, "run", "torch-ddp", *TINY, "--steps", "50", "--out",
                str(tmp_path / "runs"), fault="hang:0:2")
    wait_for(lambda: training(tmpdir), 120, "the run to train")
    assert len(processes_of(tmpdir)) >= 4  # parbench, torchrun, two ranks (+ their watchers)
    run.kill()
    run.wait()
    wait_for(lambda: not processes_of(tmpdir), 10, "the orphaned workers to end")
    assert list(tmpdir.glob("parbench-run-*"))  # SIGKILL left it behind ...
    assert parbench("list", env={"TMPDIR": str(tmpdir)}).returncode == 0
    assert not list(tmpdir.glob("parbench-*"))  # ... and the next parbench removed it


@pytest.mark.parametrize("backend,launcher", [
    pytest.param("torch-ddp", "torchrun", marks=needs("torch")),
    pytest.param("torch-ddp", "spawn", marks=needs("torch")),
    pytest.param("paddle-launch", "paddle-launch", marks=needs("paddle")),
    pytest.param("paddle-spawn", "spawn", marks=needs("paddle")),
    pytest.param("tf-multiworker", "tf-config", marks=needs("tensorflow")),
    pytest.param("jax-multiprocess", "jax-distributed", marks=needs("jax"))])
def test_error_starts_with_the_rank_that_died_first(tmp_path, backend, launcher):
    """Rank 1 SIGKILLed: its peers fail a moment later in a collective; the record's first
    line names rank 1 and the signal, not rank 0's 'connection reset by peer'."""
    result = parbench("run", backend, "--launcher", launcher, *TINY, "--steps", "20",
                      "--out", str(tmp_path), env={"PARBENCH_TEST_FAULT": "kill:1:2"})
    assert result.returncode == 1, result.stderr
    (record,) = records_in(tmp_path)
    first = record["error"].splitlines()[0]
    assert record["status"] == "failed"
    assert first.startswith("rank 1 (pid ") and first.endswith("died first: killed by SIGKILL")


@pytest.mark.parametrize("backend,launcher", [
    pytest.param("torch-ddp", "torchrun", marks=needs("torch")),
    pytest.param("paddle-launch", "paddle-launch", marks=needs("paddle")),
    pytest.param("tf-multiworker", "tf-config", marks=needs("tensorflow")),
    pytest.param("jax-multiprocess", "jax-distributed", marks=needs("jax"))])
def test_raised_exception_fails_the_run_quickly_and_is_named_with_its_rank(tmp_path, backend,
                                                                           launcher):
    """Rank 1 raises at step 2 while rank 0 goes on into the step's collective. Rank 1 writes
    its error and tears down as failed, without a collective release (that would wait for rank
    0: pytorch/torchtitan#1342), so the run fails in seconds, not at its --timeout."""
    result = parbench("run", backend, "--launcher", launcher, *TINY, "--steps", "50",
                      "--timeout", "150", "--out", str(tmp_path),
                      env={"PARBENCH_TEST_FAULT": "crash:1:2"})
    assert result.returncode == 1, result.stderr
    (record,) = records_in(tmp_path)
    assert record["status"] == "failed" and record["duration_s"] < 75
    assert record["metrics"] is None
    first = record["error"].splitlines()[0]
    assert first.startswith("rank 1 ") and "died first: exit code 1" in first
    assert first.endswith("raised RuntimeError: injected fault on rank 1 at step 2")
    assert parbench("check", str(tmp_path)).returncode == 0

