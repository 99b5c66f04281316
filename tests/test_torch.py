"""PyTorch backends end to end: equivalence of strategies, records, faults."""

from __future__ import annotations

import pytest

from conftest import default_threads, needs, parbench, records_in
from parbench.cli.parity import STRATEGY_TOLERANCE, compare_runs, run_trajectory

pytestmark = needs("torch")


@pytest.fixture(scope="module")
def single_trajectory(trajectory):
    return trajectory("torch-single")


@pytest.mark.slow  # 20 s on 2 cores; the fast lane keeps torch-single's run and its records
@pytest.mark.parametrize("launcher", ["torchrun", "spawn"])
def test_ddp_matches_single_device(tmp_path, single_trajectory, launcher):
    ddp = run_trajectory("torch-ddp", tmp_path, devices=2, launcher=launcher)
    assert ddp[0]["launcher"] == launcher and ddp[0]["world_size"] == 2
    for check in compare_runs("torch-ddp", single_trajectory, ddp, STRATEGY_TOLERANCE):
        assert check.ok, check
    # The loss really moved: equal curves are not equal because nothing trained.
    curve = single_trajectory[0]["metrics"]["loss_curve"]
    assert len(curve) == 10 and min(curve[5:]) < curve[0]


@pytest.mark.slow  # the default budget: 64 steps
def test_default_budget_reaches_high_accuracy(tmp_path):
    result = parbench("run", "torch-single", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    (record,) = records_in(tmp_path)
    metrics = record["metrics"]
    assert metrics["final_accuracy"] > 0.9
    assert len(metrics["accuracy_curve"]) == 2  # one evaluation per epoch
    assert record["env"]["threads_per_worker"] == default_threads(1)
    assert record["env"]["framework"] == "torch"


@pytest.mark.parametrize("backend,devices,extra", [
    ("torch-single", "1", []),
    pytest.param("torch-dp", "1", [], marks=pytest.mark.slow),
    pytest.param("torch-ddp", "2", ["--launcher", "spawn", "--repeats", "2"],
                 marks=pytest.mark.slow),
])
def test_run_writes_records_that_check_accepts(tmp_path, backend, devices, extra):
    result = parbench("run", backend, "--devices", devices, "--steps", "6", "--global-batch",
                      "32", "--target", "0.05", "--out", str(tmp_path), *extra)
    assert result.returncode == 0, result.stderr
    assert parbench("check", str(tmp_path)).returncode == 0
    records = records_in(tmp_path)
    assert len(records) == (2 if "--repeats" in extra else 1)
    for record in records:
        metrics = record["metrics"]
        assert record["status"] == "ok" and record["world_size"] == int(devices)
        assert metrics["throughput"] > 0 and 0 <= metrics["final_accuracy"] <= 1
        assert len(metrics["loss_curve"]) == 6 and len(metrics["peak_rss_mb"]) == int(devices)
        assert metrics["peak_device_mb"] is None  # CPU: no fake zero
        assert metrics["time_to_target_s"] is not None
        assert record["per_device_batch"] * record["world_size"] == 32
    if backend == "torch-dp":
        assert any("no-op" in note for note in records[0]["notes"])
    assert backend in result.stdout  # the table is printed


@pytest.mark.slow
def test_exited_worker_fails_the_run_quickly(tmp_path):
    """A rank that leaves by os._exit, without a traceback (a rank that raises: tests/
    test_lifetime.py, with torchrun)."""
    result = parbench("run", "torch-ddp", "--launcher", "spawn", "--steps", "50", "--model",
                      "mlp", "--global-batch", "32", "--timeout", "120", "--out", str(tmp_path),
                      env={"PARBENCH_TEST_FAULT": "exit:1:2"})
    assert result.returncode == 1
    (record,) = records_in(tmp_path)
    assert record["status"] == "failed" and record["metrics"] is None
    assert record["duration_s"] < 60
    assert parbench("check", str(tmp_path)).returncode == 0


@pytest.mark.slow
def test_hung_worker_times_out(tmp_path):
    result = parbench("run", "torch-ddp", "--launcher", "spawn", "--steps", "50", "--model",
                      "mlp", "--global-batch", "32", "--timeout", "12", "--out", str(tmp_path),
                      env={"PARBENCH_TEST_FAULT": "hang:0:1"})
    assert result.returncode == 1
    (record,) = records_in(tmp_path)
    assert record["status"] == "timeout" and record["error"].startswith("timed out after 12 s")
    assert record["duration_s"] < 32
