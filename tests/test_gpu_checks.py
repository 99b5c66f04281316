"""The GPU checks (benchmarks/gpu_checks.py) on hand-made records, where no GPU is needed: a
good record passes every check, and each wrong, missing or all-zero figure fails the check
named for it, and that check alone. tests/test_gpu.py applies them to real runs on GPUs."""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from parbench.cli.parity import STRATEGY_TOLERANCE
from parbench.run.registry import BACKENDS

ROOT = Path(__file__).resolve().parents[1]


def _benchmark(name: str):
    """A module of benchmarks/ (a folder of scripts, not a package), loaded once by its path."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


checks = _benchmark("gpu_checks")
MIB = 2 ** 20


def good(backend: str = "torch-ddp", world: int = 2, optimizer: int = 4 * MIB) -> dict:
    """What a GPU run of ``backend`` records, in the fields the checks read: ok, fp32, one GPU
    and a positive peak per device, NCCL, each rank's optimizer state ``optimizer`` bytes."""
    peaks = [900.0, 300.0] if backend == "torch-dp" else [812.5, 790.25, 805.0, 799.5][:world]
    return {"backend": backend, "framework": BACKENDS[backend].framework, "status": "ok",
            "error": None, "world_size": world, "modes": {"precision": "fp32", "compile": False},
            "metrics": {"compute_dtype": "float32", "compiled_graphs": None,
                        "peak_device_mb": peaks, "loss_curve": [2.31, 2.12, 1.97, 1.85],
                        "state_bytes": [{"parameters": 4 * MIB, "gradients": 4 * MIB,
                                         "optimizer": optimizer}] * world},
            "env": {"process_group": "nccl", "nccl_version": "2.21.5",
                    "gpus": [str(rank) for rank in range(world)]}}


def sharded(world: int = 2) -> tuple[dict, dict]:
    """A torch-fsdp record whose ranks each hold 1/N of the optimizer state, and its
    replicated twin's (torch-ddp), whose every rank holds all of it."""
    return good("torch-fsdp", world, 4 * MIB // world), good("torch-ddp", world)


def changed(record: dict, path: str, value: object) -> dict:
    """A copy of ``record`` with the field at the dotted ``path`` set to ``value``."""
    copied = copy.deepcopy(record)
    *parents, last = path.split(".")
    holder = copied
    for key in parents:
        holder = holder[key]
    holder[last] = value
    return copied


# --- a good record passes


@pytest.mark.parametrize("record, extra, twin", [
    (good(), (), None),
    (good("torch-single", 1), (), None),
    (good("torch-dp"), (), None),
    (changed(good(), "metrics.compute_dtype", "bfloat16"), ("--precision", "bf16"), None),
    (changed(good(), "metrics.compiled_graphs", 3), ("--compile",), None),
    (sharded()[0], (), None),  # against the shards' sum
    (sharded()[0], (), sharded()[1]),  # against the replicated twin
    (sharded(4)[0], (), sharded(4)[1]),
], ids=["ddp", "single", "dataparallel", "bf16", "compiled", "sharded", "sharded-twin",
        "sharded-x4"])
def test_a_good_gpu_record_passes_every_check(record, extra, twin):
    assert checks.failed_checks(record, extra, twin) == {}
    assert checks.problems(record, extra, twin) == []


# --- each wrong, missing or all-zero figure fails the check named for it


FAILS = {
    # (record, extra options, twin) -> the one check that fails
    "all-zero-state": ((changed(sharded()[0], "metrics.state_bytes",
                                [{"parameters": 0, "gradients": 0, "optimizer": 0}] * 2),
                        (), None), "sharded_state"),
    "all-zero-state-against-twin": ((changed(sharded()[0], "metrics.state_bytes",
                                             [{"parameters": 0, "gradients": 0,
                                               "optimizer": 0}] * 2), (), sharded()[1]),
                                    "sharded_state"),
    "one-rank-holds-none": ((changed(sharded()[0], "metrics.state_bytes",
                                     [{"parameters": 1, "gradients": 1, "optimizer": 4 * MIB},
                                      {"parameters": 1, "gradients": 1, "optimizer": 0}]),
                             (), None), "sharded_state"),
    "no-state-bytes": ((changed(sharded()[0], "metrics.state_bytes", None), (), None),
                       "sharded_state"),
    "twin-holds-none": ((sharded()[0], (), good("torch-ddp", optimizer=0)), "sharded_state"),
    "state-not-sharded": ((good("torch-fsdp"), (), good("torch-ddp")), "sharded_state"),
    "shards-miss-state": ((good("torch-fsdp", optimizer=MIB), (), good("torch-ddp")),
                          "sharded_state"),
    "missing-peak": ((changed(good(), "metrics.peak_device_mb", None), (), None),
                     "peak_device_mb"),
    "zero-device-memory": ((changed(good(), "metrics.peak_device_mb", [0.0, 0.0]), (), None),
                           "peak_device_mb"),
    "one-peak-for-two-devices": ((changed(good(), "metrics.peak_device_mb", [812.5]), (),
                                  None), "peak_device_mb"),
    "two-ranks-one-gpu": ((changed(good(), "env.gpus", ["0", "0"]), (), None),
                          "one_gpu_per_rank"),
    "no-gpu-named": ((changed(good(), "env.gpus", []), (), None), "one_gpu_per_rank"),
    "single-on-no-gpu": ((changed(good("torch-single", 1), "env.gpus", []), (), None),
                         "one_gpu_per_rank"),
    "gloo": ((changed(good(), "env.process_group", "gloo"), (), None), "nccl"),
    "no-library-named": ((changed(good(), "env.process_group", None), (), None), "nccl"),
    "dataparallel-without-nccl": ((changed(changed(good("torch-dp"), "env.process_group",
                                                   None), "env.nccl_version", None), (), None),
                                  "nccl"),
    "uncompiled-compile": ((good(), ("--compile",), None), "compiled_graphs"),
    "zero-graphs": ((changed(good(), "metrics.compiled_graphs", 0), ("--compile",), None),
                    "compiled_graphs"),
    "wrong-compute-dtype": ((good(), ("--precision", "bf16"), None), "compute_dtype"),
    "no-compute-dtype": ((changed(good(), "metrics.compute_dtype", None), (), None),
                         "compute_dtype"),
    "dataparallel-balanced": ((changed(good("torch-dp"), "metrics.peak_device_mb",
                                       [300.0, 900.0]), (), None), "dataparallel_imbalance"),
    "failed": ((changed(changed(good(), "status", "failed"), "metrics", None), (), None), "ok"),
    "ok-without-metrics": ((changed(good(), "metrics", None), (), None), "ok"),
}


@pytest.mark.parametrize("case, check", FAILS.values(), ids=FAILS.keys())
def test_a_wrong_missing_or_zero_figure_fails_its_named_check(case, check):
    failed = checks.failed_checks(*case)
    assert list(failed) == [check], failed
    assert checks.problems(*case) == failed[check]


@pytest.mark.parametrize("peaks", [None, [0.0, 0.0], [900.0]], ids=["missing", "zero", "one"])
def test_dataparallel_with_missing_or_zero_peaks_fails_the_imbalance_too(peaks):
    failed = checks.failed_checks(changed(good("torch-dp"), "metrics.peak_device_mb", peaks))
    assert set(failed) == {"peak_device_mb", "dataparallel_imbalance"}


def test_the_problems_say_what_is_wrong():
    record = changed(good(), "metrics.compute_dtype", "float32")
    record["env"].update(process_group="gloo", gpus=["0", "0"])
    assert checks.problems(record, ("--precision", "bf16", "--compile")) == [
        "computed in float32, asked bf16", "compiled no graph",
        "collectives not on NCCL (gloo None None)",
        "2 devices on GPUs ['0', '0']: not one GPU each"]
    zero = changed(sharded()[0], "metrics.state_bytes",
                   [{"parameters": 0, "gradients": 0, "optimizer": 0}] * 2)
    assert checks.problems(zero) == [
        "optimizer state per rank [0, 0]: not one positive value per rank"]
    assert checks.problems(good("torch-fsdp"), twin=good("torch-ddp")) == [
        ("optimizer state per rank [4194304, 4194304]: not sharded over 2 ranks "
         "(torch-ddp's per rank: 4194304)")]


def test_a_one_process_backend_s_implied_nccl_needs_its_evidence():
    """nn.DataParallel and JAX name no process group: NCCL is what they run on GPUs, shown by
    torch's NCCL version and by the GPUs JAX drove."""
    dataparallel = changed(good("torch-dp"), "env.process_group", None)
    assert checks.failed_checks(dataparallel) == {}
    jax = changed(good("jax-sharded"), "env", {"nccl_version": None, "gpus": ["0", "1"]})
    assert checks.failed_checks(jax) == {}
    assert list(checks.failed_checks(changed(jax, "env.gpus", []))) == ["nccl",
                                                                        "one_gpu_per_rank"]


# --- parity of two runs' loss curves


def test_loss_parity_passes_within_the_tolerance_and_fails_beyond_it():
    reference, ours = good("paddle-single", 1), good("paddle-sharding")
    assert checks.loss_parity(reference, ours, STRATEGY_TOLERANCE) == []
    close = [loss * (1 + STRATEGY_TOLERANCE / 2) for loss in ours["metrics"]["loss_curve"]]
    assert checks.loss_parity(reference, changed(ours, "metrics.loss_curve", close),
                              STRATEGY_TOLERANCE) == []
    apart = changed(ours, "metrics.loss_curve", [2.31, 2.12, 1.97, 1.86])
    assert checks.loss_parity(reference, apart, STRATEGY_TOLERANCE) == [
        "loss curve 4.33e-03 from paddle-single's, over 5e-05"]


@pytest.mark.parametrize("curves", [([0.0] * 4, [0.0] * 4), ([], []), (None, None),
                                    ([2.3, 2.1], [2.3, 2.1, 1.9]),
                                    ([2.3, float("nan")], [2.3, float("nan")])],
                         ids=["all-zero", "empty", "missing", "lengths", "nan"])
def test_loss_parity_fails_on_curves_that_show_no_training(curves):
    reference = changed(good("paddle-single", 1), "metrics.loss_curve", curves[0])
    ours = changed(good("paddle-sharding"), "metrics.loss_curve", curves[1])
    assert len(checks.loss_parity(reference, ours, STRATEGY_TOLERANCE)) == 1


# --- which runs, and what the checks read


def test_paddle_sharding_is_run_against_its_replicated_twin():
    """The issue: paddle-sharding was never checked. Its 2-device cases run with its twin, at
    both reshard choices, and it is the GPU-only backend whose parity test_gpu.py checks."""
    cases = list(checks.cases())
    plain = ("--model", "resnet", "--precision", "fp32")
    assert ("paddle-sharding", 2, plain) in cases
    assert ("paddle-sharding", 2, ("--model", "resnet", "--reshard-after-forward", "no")) \
        in cases
    assert BACKENDS["paddle-sharding"].replicated_twin == "paddle-launch"
    assert checks.twin_options(("--model", "resnet", "--reshard-after-forward", "no")) == (
        "--model", "resnet")
    assert [name for name, backend in BACKENDS.items() if backend.gpu_only] == \
        ["paddle-sharding"]
    assert len(set(cases)) == len(cases)


def test_only_a_refused_mode_a_gpu_must_run_fails():
    assert checks.must_run("--precision fp16 is not available for paddle-spawn on CPU")
    assert not checks.must_run("--precision is not available for paddle-sharding: not "
                               "verified with group_sharded_parallel: fp16 needs the scaler")
    assert not checks.must_run("--compile is not available for dummy-single")


def test_the_checks_read_fields_the_record_schema_has():
    """A misspelt field would fail every good GPU record, and only on a GPU machine."""
    schema = json.loads((ROOT / "common" / "results" / "record_schema.json").read_text())
    metrics = schema["properties"]["metrics"]["properties"]
    assert {"compute_dtype", "compiled_graphs", "peak_device_mb", "state_bytes",
            "loss_curve"} <= set(metrics)
    assert "optimizer" in metrics["state_bytes"]["items"]["properties"]
    assert "gpus" in schema["properties"]["env"]["properties"]
    assert {"backend", "framework", "status", "error", "world_size"} <= \
        set(schema["properties"])


def test_published_sizes_plans_every_backend_at_1_and_n_gpus_within_the_random_data():
    sizes = _benchmark("published_sizes")
    planned = sizes.cases(["resnet50", "gpt2-small"], ["torch-single", "torch-ddp"], [1, 8],
                          "bf16", gpus=8)
    assert [(c.preset, c.backend, c.devices, c.batch) for c in planned] == [
        ("resnet50", "torch-single", 1, 128), ("resnet50", "torch-ddp", 1, 128),
        ("resnet50", "torch-ddp", 8, 32),  # 8 x 128 rows would not fit the 256 random images
        ("gpt2-small", "torch-single", 1, 8), ("gpt2-small", "torch-ddp", 1, 8),
        ("gpt2-small", "torch-ddp", 8, 8)]
    assert planned[2].options(10) == ["--preset", "resnet50", "--steps", "10", "--precision",
                                      "bf16", "--per-device-batch", "32", "--devices", "8"]
    on_cpu = sizes.cases(["vit-b16"], ["torch-single", "torch-ddp"], [1], "fp32", gpus=0)
    assert [(c.backend, c.batch) for c in on_cpu] == [("torch-single", 2)]


def test_published_sizes_rows_show_mfu_memory_per_device_and_failures():
    sizes = _benchmark("published_sizes")
    case = sizes.Case("vit-b16", "torch-ddp", 2, 64, "bf16")
    record = good("torch-ddp", 2)
    record["metrics"].update(step_time_ms={"median": 250.0}, throughput=512.0,
                             peak_device_mb=[30000.0, 31000.0],
                             flops={"mfu": 0.42})
    assert sizes.row(case, record, "") == ["vit-b16", "torch-ddp", 2, "bf16", 128, 250.0, 512.0,
                                           31000.0, 42.0, "ok"]
    failed = {**record, "status": "failed", "error": "Traceback ...\ntorch.OutOfMemoryError: CUDA"}
    assert sizes.row(case, failed, "")[-1] == "failed: torch.OutOfMemoryError: CUDA"
    assert sizes.row(case, None, "parbench: error: --devices 2: needs 2 GPUs")[-1] == \
        "no record: parbench: error: --devices 2: needs 2 GPUs"


def test_gpu_acceptance_passes_its_backends_and_records_folder_to_the_published_sizes(tmp_path):
    acceptance = _benchmark("gpu_acceptance")
    args, rest = acceptance.parse(["--backends", "torch-ddp", "jax-fsdp", "--out", str(tmp_path),
                                   "--published", "--", "-x"])
    assert args.published and rest == ["-x"]
    assert acceptance.published_options(args) == [
        "--backends", "torch-ddp", "jax-fsdp", "--out", str(tmp_path.resolve() / "published")]
    assert acceptance.published_options(acceptance.parse([])[0]) == []
