"""Run modes on the Paddle backends, through the CLI: the dtype the first layer really computed
in, to_static's programs and their trajectory against eager, gradient accumulation against
more devices, the classification scores of the evaluation, and the modes Paddle cannot run on
a CPU (refused before anything starts). AMP and SyncBatchNorm need GPUs: those cases are
written for a GPU machine and skipped here."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import assert_scores_follow_predictions, needs, parbench, records_in, run_digits
from parbench.base.devices import gpu_count
from parbench.cli.parity import STRATEGY_TOLERANCE, compare_runs, run_trajectory
from parbench.contract.data import load_dataset

pytestmark = needs("paddle")

DATASET = "digits"  # why digits for trajectories: see test_paddle.py
# to_static runs the same PHI kernels as eager on the CPU: the trajectories measured equal to
# the bit (0.0), single and DataParallel, with and without BatchNorm. The tolerance only
# leaves room for a backend that fuses (CINN on GPUs).
COMPILE_TOLERANCE = 1e-6
# The resnet has 9 BatchNorm layers (stem, 2 per block, 2 projection shortcuts)
RESNET_BATCHNORMS = 9
ON_CPU = pytest.mark.skipif(gpu_count() > 0, reason="with GPUs Paddle AMP and SyncBatchNorm "
                            "are available, so config does not refuse them")


def needs_gpus(count: int):
    return pytest.mark.skipif(gpu_count() < count, reason=f"needs {count} GPU(s) and a CUDA "
                              "build of Paddle: AMP and SyncBatchNorm have no effect or no "
                              "kernel on CPU")


@pytest.fixture(scope="module")
def eager_single(trajectory):
    return trajectory("paddle-single", dataset=DATASET)


@pytest.mark.slow
def test_plain_run_observes_float32_and_scores_its_predictions(tmp_path):
    record = run_digits(tmp_path, "paddle-single")  # resnet with BatchNorm
    metrics = record["metrics"]
    assert record["modes"] == {"precision": "fp32", "compile": False, "sync_bn": False,
                               "grad_accum": 1, "input": "arrays", "loader_workers": 0,
                               "reshard_after_forward": "yes"}
    assert metrics["compute_dtype"] == "float32"
    assert metrics["compiled_graphs"] is None and metrics["sync_bn_layers"] == 0
    assert metrics["micro_batches"] == 1
    assert_scores_follow_predictions(metrics, load_dataset(DATASET).y_test)


@pytest.mark.slow
def test_compiled_trajectory_equals_eager(tmp_path, eager_single):
    compiled = run_trajectory("paddle-single", tmp_path, dataset=DATASET, compile=True)
    for check in compare_runs("paddle-single --compile", eager_single, compiled,
                              COMPILE_TOLERANCE):
        assert check.ok, check
    record = compiled[0]
    # one program for training and one for evaluation (a new mode and input shape): both ran
    # as static programs, counted in to_static's program cache
    assert record["metrics"]["compiled_graphs"] == 2
    assert record["metrics"]["compute_dtype"] == "float32"
    assert any("to_static(full_graph=True)" in note for note in record["notes"])


@pytest.mark.slow
def test_compile_turns_off_the_onednn_flags_it_segfaults_with(tmp_path):
    """Set in the environment, either flag made the first compiled step segfault."""
    out = tmp_path / "out"
    done = parbench("run", "paddle-single", "--compile", "--dataset", DATASET, "--steps", "2",
                    "--global-batch", "32", "--out", str(out), cwd=tmp_path,
                    env={"FLAGS_use_mkldnn": "1", "FLAGS_use_onednn": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    (record,) = records_in(out)
    assert record["status"] == "ok" and record["metrics"]["compiled_graphs"] >= 1
    assert "--compile turned off FLAGS_use_mkldnn, FLAGS_use_onednn: to_static segfaults " \
        "with either" in record["notes"]


@pytest.mark.slow
def test_compiled_data_parallel_trajectory_equals_eager(tmp_path):
    """DataParallel(to_static(model)) under spawn, 2 processes."""
    eager = run_trajectory("paddle-spawn", tmp_path / "eager", dataset=DATASET, devices=2)
    compiled = run_trajectory("paddle-spawn", tmp_path / "compiled", dataset=DATASET,
                              devices=2, compile=True)
    for check in compare_runs("paddle-spawn --compile", eager, compiled, COMPILE_TOLERANCE):
        assert check.ok, check
    assert compiled[0]["metrics"]["compiled_graphs"] >= 1


@pytest.mark.slow
def test_compiled_batchnorm_updates_running_statistics_like_eager(tmp_path):
    """Our BatchNorm assigns its running statistics in forward: to_static must keep that."""
    eager, compiled = (run_trajectory("paddle-single", tmp_path / name, steps=6,
                                      dataset=DATASET, model="resnet", **flags)
                       for name, flags in (("eager", {}), ("compiled", {"compile": True})))
    variances = [k for k in eager[1] if k.endswith("running_var")]
    assert len(variances) == RESNET_BATCHNORMS
    assert max(np.abs(eager[1][k] - 1).max() for k in variances) > 0.1  # they moved
    for check in compare_runs("paddle-single --compile (BatchNorm)", eager, compiled,
                              COMPILE_TOLERANCE):
        assert check.ok, check


@pytest.mark.slow
def test_one_device_accumulating_two_micro_batches_follows_two_devices(trajectory):
    """On the BatchNorm resnet, where accumulation shows: one device accumulating 2
    micro-batches normalises each with its own statistics, as each of 2 DataParallel ranks
    normalises its shard, so it follows 2 devices (the trained weights and the loss; the
    running statistics are updated twice in turn on one device, once per rank on two); one
    device on the whole batch does not."""
    bn = dict(dataset=DATASET, model="resnet")
    accumulated = trajectory("paddle-single", grad_accum=2, **bn)
    two_devices = trajectory("paddle-spawn", devices=2, **bn)
    whole = trajectory("paddle-single", **bn)
    for check in compare_runs("paddle-single --grad-accum 2", two_devices, accumulated,
                              STRATEGY_TOLERANCE, statistics=False):
        assert check.ok, check
    apart = compare_runs("paddle-single", two_devices, whole, statistics=False)[0]
    assert apart.max_rel_diff > 100 * STRATEGY_TOLERANCE
    assert accumulated[0]["metrics"]["micro_batches"] == 2  # two backward passes, not one
    assert two_devices[0]["metrics"]["micro_batches"] == 1


@pytest.mark.slow
def test_launch_accumulates_with_no_sync(tmp_path, eager_single):
    """2 processes x 2 micro-batches of 8 rows; DataParallel all-reduces in the last backward
    only. The trajectory still follows one device on the whole batch, and both ranks' parts of
    the test set are counted once."""
    run = run_trajectory("paddle-launch", tmp_path, dataset=DATASET, devices=2, grad_accum=2)
    for check in compare_runs("paddle-launch --grad-accum 2", eager_single, run,
                              STRATEGY_TOLERANCE):
        assert check.ok, check
    metrics = run[0]["metrics"]
    assert metrics["micro_batches"] == 2 and run[0]["modes"]["grad_accum"] == 2
    labels = load_dataset(DATASET).y_test
    confusion = np.array(metrics["confusion_matrix"])
    assert confusion.sum(axis=1).tolist() == np.bincount(labels, minlength=10).tolist()


@ON_CPU
@pytest.mark.parametrize("backend,args,reason", [
    ("paddle-single", ("--precision", "bf16"), "Paddle AMP has no effect on CPU: under "
     "paddle.amp.auto_cast to bfloat16 or float16 a Conv2D's and a Linear's outputs stay "
     "float32"),
    ("paddle-launch", ("--precision", "fp16", "--devices", "2"), "Paddle AMP has no effect on "
     "CPU"),
    ("paddle-spawn", ("--sync-bn", "--devices", "2"), "paddle.nn.SyncBatchNorm has no CPU "
     "kernel"),
    ("paddle-launch", ("--sync-bn", "--compile", "--devices", "2"), "paddle.nn.SyncBatchNorm "
     "has no CPU kernel"),
])
def test_cpu_refuses_amp_and_sync_batchnorm(tmp_path, backend, args, reason):
    out = tmp_path / "out"
    done = parbench("run", backend, *args, "--steps", "2", "--out", str(out), timeout=60)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert f"is not available for {backend}: {reason}" in line
    assert not out.exists() or not list(out.iterdir())


@needs_gpus(1)
@pytest.mark.parametrize("precision,dtype", [("bf16", "bfloat16"), ("fp16", "float16")])
@pytest.mark.parametrize("compile", [False, True])
def test_amp_computes_in_the_low_precision_on_gpu(tmp_path, precision, dtype, compile):
    record = run_digits(tmp_path, "paddle-single", "--precision", precision,
                        *(["--compile"] if compile else []), steps=10)
    assert record["metrics"]["compute_dtype"] == dtype
    curve = record["metrics"]["loss_curve"]
    assert all(np.isfinite(curve)) and min(curve[5:]) < curve[0]


@needs_gpus(2)
def test_sync_batchnorm_makes_two_gpus_follow_one(tmp_path):
    """The BatchNorm resnet: 2 GPUs x 16 rows with synchronized statistics follow 1 GPU x 32
    (losses, weights and the running statistics in the spec's convention)."""
    single = run_trajectory("paddle-single", tmp_path / "single", dataset=DATASET,
                            model="resnet", steps=5)
    synced = run_trajectory("paddle-spawn", tmp_path / "synced", dataset=DATASET,
                            model="resnet", steps=5, devices=2, sync_bn=True)
    assert synced[0]["metrics"]["sync_bn_layers"] == RESNET_BATCHNORMS
    for check in compare_runs("paddle-spawn --sync-bn", single, synced, 1e-4):
        assert check.ok, check
