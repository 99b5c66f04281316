"""parbench compare: a sweep that is interrupted keeps its records, --resume completes it
without redoing or duplicating any; parbench parity's verdicts."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import needs, parbench, records_in
from parbench.cli.parity import Comparison, relative_difference

# the mlp: what is checked is the sweep's bookkeeping, not what its runs compute
SWEEP = ["compare", "torch-single", "torch-ddp", "--devices", "1,2", "--steps", "4",
         "--global-batch", "32", "--repeats", "2", "--model", "mlp"]
EXPECTED = {("torch-single", 1, r) for r in range(2)} | {("torch-ddp", n, r) for n in (1, 2)
                                                        for r in range(2)}


@pytest.mark.slow
@needs("torch")
def test_interrupted_sweep_resumes_without_loss_or_duplicates(tmp_path):
    out, report = tmp_path / "runs", tmp_path / "report"
    args = [*SWEEP, "--out", str(out), "--report-dir", str(report)]
    # A shell's background jobs start with SIGINT ignored, and Python then never turns it into
    # KeyboardInterrupt: give the sweep the default disposition a user's terminal gives it.
    sweep = subprocess.Popen([sys.executable, "-m", "parbench.cli", *args],
                             stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 300
    while not (out.is_dir() and len(list(out.glob("*.json"))) >= 2):
        assert sweep.poll() is None and time.monotonic() < deadline, sweep.stderr.read()
        time.sleep(0.2)
    sweep.send_signal(signal.SIGINT)
    assert sweep.wait(timeout=60) == 130, sweep.stderr.read()
    before = {r["run_id"]: r for r in records_in(out)}
    assert 2 <= len(before) < len(EXPECTED)
    assert not list(out.glob(".*.tmp"))  # the interrupted run left nothing half-written

    resumed = parbench(*args, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stderr.count("kept (an ok record exists)") == len(before)
    after = records_in(out)
    assert {(r["backend"], r["world_size"], r["repeat"]) for r in after} == EXPECTED
    assert len(after) == len(EXPECTED)
    assert all(before[r["run_id"]] == r for r in after if r["run_id"] in before)
    assert (report / "report.html").is_file() and "torch-ddp" in resumed.stdout


@needs("torch")
def test_compare_refuses_unknown_backends_and_bad_device_lists(tmp_path):
    for args, fragment in ((["torch-fast"], "unknown backend(s) torch-fast"),
                           (["torch-single", "--devices", "one"], "comma-separated")):
        result = parbench("compare", *args, "--out", str(tmp_path / "runs"))
        assert result.returncode == 2 and fragment in result.stderr
    assert not (tmp_path / "runs").exists()


def test_parity_verdicts():
    reference = np.array([[1.0, -2.0], [4.0, 0.5]])
    assert relative_difference(reference, reference + 4e-6) == pytest.approx(1e-6)
    assert relative_difference(reference, reference[:1]) == float("inf")
    assert Comparison("tf", "logits", 2e-5, 1e-5).ok is False
    assert Comparison("tf", "logits", 1e-6, 1e-5).ok is True


@pytest.mark.slow
@needs("torch")
def test_parity_command_checks_strategies(tmp_path):
    result = parbench("parity", "--framework", "torch", "--strategies", "torch-ddp")
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if "torch-ddp x2" in line]
    assert len(rows) == 2 and all(line.rstrip(" |").endswith("ok") for line in rows)
    diffs = [float(line.split("|")[3]) for line in rows]
    assert all(0 <= d < 5e-5 for d in diffs)


@pytest.mark.slow
@needs("torch")
def test_parity_compile_checks_the_compiled_trajectory_against_eager(tmp_path):
    result = parbench("parity", "--compile", "--framework", "torch")
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if "compiled vs eager" in line]
    assert [line.split("|")[1].strip() for line in rows] == [
        "torch-single x1 compiled vs eager"] * 2
    diffs = [float(line.split("|")[3]) for line in rows]
    assert all(0 <= d < 1e-4 for d in diffs) and all(line.rstrip(" |").endswith("ok")
                                                     for line in rows)
