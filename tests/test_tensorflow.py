"""TensorFlow backends: forward and training parity with torch, MirroredStrategy (custom loop
and Keras fit) and MultiWorkerMirroredStrategy against one device, records, the replica-device
guard, bad input and faults. TensorFlow only ever runs in subprocesses.

Each TF process spends ~6 s importing TensorFlow, so independent runs go two at a time and
one training run serves several checks.
"""

from __future__ import annotations

import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import default_threads, needs, parbench, records_in
from parbench.cli.parity import (
    FORWARD_CASES,
    STRATEGY_TOLERANCE,
    TRAJECTORY_TOLERANCE,
    compare_runs,
    forward_checks,
    forward_inputs,
)
from parbench.contract.weights import load_weights
from parbench.launch.exits import first_failure

pytestmark = needs("tensorflow")

LANES = 2  # concurrent subprocesses: each is mostly a single-threaded TensorFlow import
# Trajectories train on digits (8x8 images): on the 32x32 synthetic set at lr 0.1, one-ulp
# reduction-order differences grow ~3x per step through ReLUs flipping at zero. Measured there:
# tf-single on 1 thread vs 2 replicas 7e-6 apart after one step, 1.3e-3 after ten, while
# tf-mirrored and tf-multiworker at equal threads are bit-identical. On digits every pair below
# ends within 1e-6. Warm-up + cosine change lr every step: Keras' own SGD would differ there.
TRAINING = ["--dataset", "digits", "--steps", "10", "--global-batch", "32",
            "--warmup-steps", "3"]
RUNS = {  # name: (backend, options); nonorm runs are compared with tf-single
    "torch-single": ("torch-single", ["--model", "resnet-nonorm"]),
    "tf-single": ("tf-single", ["--model", "resnet-nonorm", "--target", "0.05"]),
    "tf-mirrored": ("tf-mirrored", ["--model", "resnet-nonorm"]),
    "tf-multiworker": ("tf-multiworker", ["--model", "resnet-nonorm"]),
    # BatchNorm statistics depend on which rows each replica gets: fit's feed is checked here
    "tf-mirrored-bn": ("tf-mirrored", ["--model", "resnet"]),
    "tf-mirrored-keras-bn": ("tf-mirrored-keras", ["--model", "resnet"]),
}


def _in_lanes(function, items: list) -> list:
    with ThreadPoolExecutor(LANES) as pool:
        return list(pool.map(function, items))


def _train(folder: Path, name: str) -> tuple[dict, dict]:
    """(record, final weights) of one RUNS entry through `parbench run`, checked by
    `parbench check`."""
    backend, options = RUNS[name]
    out, weights = folder / name, folder / f"{name}.npz"
    result = parbench("run", backend, *TRAINING, *options, "--save-weights", str(weights),
                      "--out", str(out), cwd=folder)
    assert result.returncode == 0, result.stderr
    checked = parbench("check", str(out))
    assert checked.returncode == 0, checked.stdout
    (record,) = records_in(out)
    return record, load_weights(weights)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[dict, dict]]:
    folder = tmp_path_factory.mktemp("runs")
    return dict(zip(RUNS, _in_lanes(lambda name: _train(folder, name), list(RUNS))))


@pytest.mark.slow
@needs("torch")
def test_forward_matches_torch(forwards):
    for case in FORWARD_CASES:
        checks = forward_checks("tensorflow", case, forwards("torch")[case],
                                forwards("tensorflow")[case])
        model, mode = case
        if mode == "train":  # every running statistic is compared after the training pass
            statistics = {name for name in forward_inputs(model)[1] if "running_" in name}
            assert {c.check.split(": ")[1] for c in checks[1:]} == statistics
        for check in checks:
            assert check.ok, check


@pytest.mark.slow  # the runs fixture trains six 10-step runs
@needs("torch")
def test_ten_steps_match_torch(runs):
    for check in compare_runs("tf-single", runs["torch-single"], runs["tf-single"],
                              TRAJECTORY_TOLERANCE):
        assert check.ok, check
    curve = runs["tf-single"][0]["metrics"]["loss_curve"]
    assert len(curve) == 10 and min(curve[5:]) < curve[0]  # it trained


@pytest.mark.slow
@pytest.mark.parametrize("name,reference", [
    ("tf-mirrored", "tf-single"),
    ("tf-multiworker", "tf-single"),
    ("tf-mirrored-keras-bn", "tf-mirrored-bn"),
])
def test_strategy_matches_its_reference(runs, name, reference):
    for check in compare_runs(name, runs[reference], runs[name], STRATEGY_TOLERANCE):
        assert check.ok, check


@pytest.mark.slow
def test_records_are_plausible(runs):
    for name, (record, _weights) in runs.items():
        metrics, env = record["metrics"], record["env"]
        assert record["status"] == "ok", name
        assert metrics["throughput"] > 0 and 0 <= metrics["final_accuracy"] <= 1
        assert len(metrics["loss_curve"]) == 10
        if record["framework"] != "tensorflow":
            continue
        processes = 2 if name == "tf-multiworker" else 1
        assert len(metrics["peak_rss_mb"]) == processes
        assert metrics["peak_device_mb"] is None  # CPU: no fake figure
        # step 0 traces the tf.function: reported alone, far slower than a steady step
        assert metrics["first_step_s"] > 2 * metrics["step_time_ms"]["median"] / 1000
        assert env["intra_op_threads"] == env["inter_op_threads"] == env["threads_per_worker"]
        assert env["threads_per_worker"] == default_threads(processes), name
        assert len(set(env["device_names"])) == len(env["device_names"]) == record["world_size"]
        # every replica holds a whole copy; gradients live only inside the compiled step
        held = metrics["state_bytes"]
        assert len(held) == record["world_size"] and all(h == held[0] for h in held), name
        assert held[0]["parameters"] > 0 and held[0]["gradients"] == 0, name
        assert held[0]["optimizer"] >= held[0]["parameters"], name  # SGD momentum, per tensor
        assert metrics["communication"]["bytes"] is None, name  # not countable: said why
    assert runs["tf-single"][0]["metrics"]["time_to_target_s"] is not None
    assert runs["tf-mirrored"][0]["env"]["device_names"] == [
        "/job:localhost/replica:0/task:0/device:CPU:0",
        "/job:localhost/replica:0/task:0/device:CPU:1"]  # logical devices, one per replica
    multiworker = runs["tf-multiworker"][0]
    assert multiworker["launcher"] == "tf-config" and multiworker["env"]["communication"] == "RING"
    assert any("global-batch loss" in note for note in multiworker["notes"])
    keras_fit = runs["tf-mirrored-keras-bn"][0]
    assert keras_fit["env"]["keras_fit"] is True
    assert any("tf.data pipeline" in note for note in keras_fit["notes"])


GUARD = """
from parbench.frameworks.tensorflow import runtime
from parbench.frameworks.tensorflow.model import build_model
from parbench.contract.spec import build_spec
from parbench.contract.weights import initial_weights

# no logical devices configured: TF accepts both names and keeps every replica on CPU:0
strategy = runtime.tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
spec = build_spec("mlp", (1, 8, 8), 10)
with strategy.scope():
    model = build_model(spec, initial_weights(spec, 0))
print(strategy.num_replicas_in_sync, "replicas")
runtime.checked_replica_devices(strategy, model)
"""


@pytest.mark.slow
def test_replicas_sharing_a_device_are_an_error():
    done = subprocess.run([sys.executable, "-c", GUARD], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode != 0 and done.stdout.strip() == "2 replicas"
    assert "replicas share a device" in done.stderr


@pytest.mark.parametrize("backend", ["tf-mirrored", "tf-mirrored-keras", "tf-multiworker"])
def test_more_devices_than_the_machine_has_is_refused(tmp_path, backend):
    result = parbench("run", backend, "--devices", "999", "--out", str(tmp_path))
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"parbench: error: {backend}: --devices 999 but this machine has ")
    assert not list(tmp_path.iterdir())


def test_keras_fit_under_multiworker_is_refused(tmp_path):
    result = parbench("run", "tf-mirrored-keras", "--launcher", "tf-config", "--out",
                      str(tmp_path))
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "has no launcher 'tf-config'" in result.stderr
    assert "keras-team/keras#20585" in result.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_dead_worker_fails_the_run_quickly(tmp_path):
    """A worker that leaves by os._exit, without a traceback (one that raises: tests/
    test_lifetime.py)."""
    result = parbench("run", "tf-multiworker", "--dataset", "digits", "--model", "mlp",
                      "--steps", "200", "--global-batch", "32", "--timeout", "150",
                      "--out", str(tmp_path), env={"PARBENCH_TEST_FAULT": "exit:1:2"})
    assert result.returncode == 1
    (record,) = records_in(tmp_path)
    assert record["status"] == "failed" and record["metrics"] is None
    # the survivor would wait in its collective for ever: killed within seconds instead
    assert record["duration_s"] < 75
    assert parbench("check", str(tmp_path)).returncode == 0


def test_supervisor_kills_the_survivors_of_a_dead_worker(tmp_path):
    """A worker that dies before joining leaves its peers waiting in the strategy's setup for
    over ten minutes, deaf to SIGTERM (measured): the tf-config supervisor must kill them."""
    from parbench.frameworks.tensorflow import multiworker

    assert "tensorflow" not in sys.modules  # the supervising process imports this much only
    waiting = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    dead = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="tf-config: worker 1 exit code 3; stopped the others"):
        multiworker.workers.supervise([waiting, dead], [0, 1], tmp_path, "tf-config")
    assert waiting.poll() is not None and time.monotonic() - start < 10
    assert first_failure(tmp_path).endswith("died first: exit code 3")
