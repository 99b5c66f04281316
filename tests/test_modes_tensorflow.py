"""Run modes on the TensorFlow backends, through parbench's own runs: the dtype the first layer
really computed in (bf16, fp16 with loss scaling, fit included), XLA's compiled functions and
their trajectory against the plain graph, synchronized BatchNorm making 2 replicas follow one
device (custom loop, MultiWorker and fit), gradient accumulation on one device following two,
the per-row predictions behind the classification scores, and what is refused.

Each TensorFlow process spends ~6 s importing TensorFlow: the slow cases share one set of
runs, two at a time.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from conftest import assert_scores_follow_predictions, needs, parbench, records_in, run_ok
from parbench.cli.parity import STRATEGY_TOLERANCE, compare_runs
from parbench.contract.data import load_dataset
from parbench.contract.weights import load_weights

pytestmark = needs("tensorflow")

DATASET = "digits"  # why digits for trajectories: see parbench.parity.run_trajectory
LANES = 2
# XLA fuses the step's operations into other kernels than the plain graph's: measured 8.7e-8
# on the loss curve and 7.2e-7 on the worst weight after 10 steps; both trajectories are fp32.
COMPILE_TOLERANCE = 1e-5
SYNC_BN_TOLERANCE = 1e-4  # the bound; measured 9.5e-8 (Mirrored, MultiWorker, fit)
# Largest loss difference from fp32 over 6 steps of the BatchNorm resnet, measured: bf16 7.2e-3,
# fp16 2.4e-3 (fit with XLA 2.0e-3). Far from fp32's rounding, far below a broken loss scaling
# (an update with gradients still scaled by 2**15 diverges).
REDUCED_PRECISION_GAP = (1e-6, 2e-2)
RESNET_BATCHNORMS = 9  # stem, 2 per block, 2 projection shortcuts
# run_trajectory's settings (parbench.cli.parity), through the CLI: run_once is not thread-safe
# (a finished run kills its process tree's leftovers), so parallel lanes are separate processes
TRAJECTORY = ["--model", "resnet-nonorm", "--dataset", DATASET, "--steps", "10",
              "--global-batch", "32", "--schedule", "constant"]
BN_RESNET = ["--model", "resnet"]
TWO = ["--devices", "2"]
SIX_STEPS = ["--steps", "6"]
RUNS = {  # name: (backend, options after TRAJECTORY's)
    "single": ("tf-single", []),
    "single-compile": ("tf-single", ["--compile"]),
    "single-bn-accum2": ("tf-single", [*BN_RESNET, "--grad-accum", "2"]),
    "mirrored": ("tf-mirrored", TWO),
    "single-bn": ("tf-single", BN_RESNET),
    "mirrored-bn": ("tf-mirrored", [*BN_RESNET, *TWO]),
    "mirrored-syncbn": ("tf-mirrored", [*BN_RESNET, *TWO, "--sync-bn"]),
    "multiworker-syncbn": ("tf-multiworker", [*BN_RESNET, *TWO, "--sync-bn"]),
    "keras-syncbn": ("tf-mirrored-keras", [*BN_RESNET, *TWO, "--sync-bn"]),
    "single-bn-bf16": ("tf-single", [*BN_RESNET, *SIX_STEPS, "--precision", "bf16"]),
    "single-bn-fp16": ("tf-single", [*BN_RESNET, *SIX_STEPS, "--precision", "fp16"]),
    "keras-fp16-compile": ("tf-mirrored-keras", [*BN_RESNET, *SIX_STEPS, *TWO, "--precision",
                                                 "fp16", "--compile"]),
}


def _train(folder: Path, name: str) -> tuple[dict, dict]:
    backend, options = RUNS[name]
    out, weights = folder / name, folder / f"{name}.npz"
    done = parbench("run", backend, *TRAJECTORY, *options, "--save-weights", str(weights),
                    "--out", str(out), cwd=folder)
    assert done.returncode == 0, f"{name}: {done.stderr[-3000:]}"
    (record,) = records_in(out)
    return record, load_weights(weights)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[dict, dict]]:
    """(record, final weights) of every RUNS entry."""
    folder = tmp_path_factory.mktemp("modes")
    with ThreadPoolExecutor(LANES) as pool:
        return dict(zip(RUNS, pool.map(lambda name: _train(folder, name), list(RUNS))))


def metrics_of(runs: dict, name: str) -> dict:
    return runs[name][0]["metrics"]


def curve_gap(runs: dict, name: str, reference: str) -> float:
    """Largest loss difference over the steps both ran."""
    curve, ref = metrics_of(runs, name)["loss_curve"], metrics_of(runs, reference)["loss_curve"]
    return float(np.abs(np.array(curve) - ref[:len(curve)]).max())


@pytest.mark.slow
def test_bf16_run_computes_in_bfloat16_and_scores_every_row(tmp_path):
    record = run_ok(tmp_path, "tf-single", "--precision", "bf16", "--steps", "6", "--dataset",
                    DATASET, "--global-batch", "32")
    metrics = record["metrics"]
    assert record["modes"] == {"precision": "bf16", "compile": False, "sync_bn": False,
                               "grad_accum": 1, "input": "arrays", "loader_workers": 0,
                               "reshard_after_forward": "yes"}
    assert metrics["compute_dtype"] == "bfloat16"  # the stem's output in the traced step
    assert metrics["compiled_graphs"] is None and metrics["micro_batches"] == 1
    assert np.isfinite(metrics["loss_curve"]).all()
    # one prediction per test row: every row counted once, under its true class
    assert_scores_follow_predictions(metrics, load_dataset(DATASET).y_test)


@pytest.mark.parametrize("backend,option", [("tf-mirrored-keras", ["--grad-accum", "2"]),
                                            ("tf-single", ["--sync-bn"])])
def test_what_tensorflow_cannot_do_is_refused(tmp_path, backend, option):
    done = parbench("run", backend, *option, "--dataset", DATASET, "--out", str(tmp_path))
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("parbench: error: ") and f"{option[0]} " in line
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_plain_runs_observe_fp32_and_no_mode(runs):
    for name in ("single", "mirrored", "single-bn"):
        metrics = metrics_of(runs, name)
        assert metrics["compute_dtype"] == "float32", name
        assert metrics["compiled_graphs"] is None and metrics["sync_bn_layers"] == 0
        assert metrics["micro_batches"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("name,precision,dtype", [("single-bn-bf16", "bf16", "bfloat16"),
                                                  ("single-bn-fp16", "fp16", "float16"),
                                                  ("keras-fp16-compile", "fp16", "float16")])
def test_reduced_precision_computes_in_it_and_trains_like_fp32(runs, name, precision, dtype):
    metrics = metrics_of(runs, name)
    assert runs[name][0]["modes"]["precision"] == precision
    assert metrics["compute_dtype"] == dtype
    assert np.isfinite(metrics["loss_curve"]).all()
    # fp16's loss scaling is undone before the update: the curve stays near fp32's
    reference = "mirrored-bn" if name.startswith("keras") else "single-bn"
    low, high = REDUCED_PRECISION_GAP
    assert low < curve_gap(runs, name, reference) < high


@pytest.mark.slow
def test_compiled_trajectory_equals_the_plain_graph(runs):
    metrics = metrics_of(runs, "single-compile")
    assert metrics["compiled_graphs"] == 1  # the loss+gradient function, on the one device
    for check in compare_runs("tf-single --compile", runs["single"], runs["single-compile"],
                              COMPILE_TOLERANCE):
        assert check.ok, check
    # fit compiles the same per-replica function, once per replica device
    assert metrics_of(runs, "keras-fp16-compile")["compiled_graphs"] == 2


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mirrored-syncbn", "multiworker-syncbn", "keras-syncbn"])
def test_sync_bn_makes_two_replicas_follow_one_device(runs, name):
    assert metrics_of(runs, name)["sync_bn_layers"] == RESNET_BATCHNORMS
    for check in compare_runs(name, runs["single-bn"], runs[name], SYNC_BN_TOLERANCE):
        assert check.ok, check
    # the replicas' predictions, joined in row order, score every row as the one device does
    assert metrics_of(runs, name)["confusion_matrix"] == (
        metrics_of(runs, "single-bn")["confusion_matrix"])
    # without it each replica normalises its own half: the curves part visibly
    unsynchronized = compare_runs("mirrored-bn", runs["single-bn"], runs["mirrored-bn"])[0]
    assert unsynchronized.max_rel_diff > 100 * SYNC_BN_TOLERANCE


@pytest.mark.slow
def test_accumulating_two_micro_batches_on_one_device_follows_two_devices(runs):
    """On the BatchNorm resnet, where accumulation shows: each micro-batch is normalised with
    its own statistics, as each replica normalises its shard, so one device accumulating 2
    micro-batches follows 2 replicas (the trained weights and the loss; the running statistics
    are updated twice in turn on one device, once per replica on two), while one device on
    the whole batch parts from them (test_sync_bn...: > 100 x the sync-BN tolerance)."""
    assert metrics_of(runs, "single-bn-accum2")["micro_batches"] == 2
    for check in compare_runs("tf-single --grad-accum 2", runs["mirrored-bn"],
                              runs["single-bn-accum2"], STRATEGY_TOLERANCE, statistics=False):
        assert check.ok, check
    whole = compare_runs("tf-single", runs["mirrored-bn"], runs["single-bn"],
                         statistics=False)[0]
    assert whole.max_rel_diff > 100 * STRATEGY_TOLERANCE
