"""What only GPUs can show (``pytest -m gpu``; benchmarks/gpu_acceptance.sh is the one command
that runs these on a machine with GPUs): every case of benchmarks/gpu_checks.cases through
``parbench run`` like a user, its record put through every check there; and each GPU-only
backend (paddle-sharding) against its framework's single device, the parity no CPU can run.

Each test is skipped with the reason where this machine has no CUDA GPU, too few for the case,
or the backend is not installed; a case parbench refuses is skipped with the refusal, unless it
is one a GPU must run. The checks themselves are shown on hand-made records, without a GPU, in
tests/test_gpu_checks.py.

gpu_acceptance.py's options reach here as environment variables: PARBENCH_GPU_STEPS (6),
PARBENCH_GPU_OUT (keep the records there), PARBENCH_GPU_BACKENDS and PARBENCH_GPU_MODELS
(space-separated; default: every backend, both models)."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

from conftest import parbench, shared_result
from parbench.base.devices import gpu_count
from parbench.cli.parity import FAMILIES, compare_runs
from parbench.run.registry import BACKENDS, FRAMEWORKS


def _benchmark(name: str):
    """A module of benchmarks/ (a folder of scripts, not a package), loaded once by its path."""
    if name not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(name, path)
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


checks = _benchmark("gpu_checks")
pytestmark = [pytest.mark.gpu, pytest.mark.slow]

STEPS = int(os.environ.get("PARBENCH_GPU_STEPS") or 6)
OUT = os.environ.get("PARBENCH_GPU_OUT") or None
NAMES = os.environ.get("PARBENCH_GPU_BACKENDS", "").split() or list(BACKENDS)
CASES = list(checks.cases(NAMES, tuple(os.environ.get("PARBENCH_GPU_MODELS", "").split())
                          or checks.MODELS))
GPU_ONLY = [name for name in NAMES if BACKENDS[name].gpu_only]
REFUSED = 2  # parbench's exit status for a configuration it refuses


def case_name(backend: str, devices: int, extra: tuple[str, ...]) -> str:
    return f"{backend}-x{devices}-{'-'.join(option.strip('-') for option in extra)}"


def require(backend: str, devices: int) -> None:
    """Skip, with its reason, a case this machine cannot run."""
    gpus = gpu_count()
    if not gpus:
        pytest.skip("no CUDA GPU here (parbench.base.devices.gpu_count() is 0): the GPU checks "
                    "run on a machine with NVIDIA GPUs (benchmarks/gpu_acceptance.sh)")
    if devices > gpus:
        pytest.skip(f"needs {devices} GPUs, this machine has {gpus}")
    if (reason := BACKENDS[backend].missing_reason()) is not None:
        pytest.skip(f"{backend}: {reason}")


class Outcome(NamedTuple):
    code: int
    stderr: str
    record: dict | None


def _run(folder: Path, backend: str, devices: int, extra: tuple[str, ...]) -> Outcome:
    """One ``parbench run`` into ``folder``; the record it wrote there (none before it counts)."""
    folder.mkdir(parents=True, exist_ok=True)
    before = set(folder.glob("*.json"))
    done = parbench("run", backend, "--devices", str(devices), "--steps", str(STEPS),
                    "--global-batch", "64", "--out", str(folder), *extra, timeout=1800)
    written = sorted(set(folder.glob("*.json")) - before)
    return Outcome(done.returncode, done.stderr,
                   json.loads(written[0].read_text()) if written else None)


def gpu_run(tmp_path_factory, backend: str, devices: int, extra: tuple[str, ...]) -> Outcome:
    """The case's outcome, run once per session: a sharded case's twin may be a case too."""
    name = case_name(backend, devices, extra)
    folder = Path(OUT) if OUT else tmp_path_factory.getbasetemp()
    # kept as a plain tuple: another pytest-xdist worker unpickles it
    return Outcome(*shared_result(tmp_path_factory, ("gpu-run", backend, devices, extra, STEPS),
                                  lambda: tuple(_run(folder / name, backend, devices, extra))))


def recorded(outcome: Outcome) -> dict:
    """The run's record; a refusal skips with parbench's reason, or fails where a GPU must run
    the case."""
    if outcome.code == REFUSED and outcome.record is None:
        reason = (outcome.stderr.strip().splitlines() or ["?"])[-1]
        if checks.must_run(reason):
            pytest.fail(f"refused on GPU: {reason}")
        pytest.skip(f"parbench refuses it: {reason}")
    if outcome.record is None:
        pytest.fail(f"no record (exit {outcome.code}): {outcome.stderr[-3000:]}")
    return outcome.record


@pytest.mark.parametrize("backend, devices, extra",
                         [pytest.param(*case, id=case_name(*case)) for case in CASES])
def test_a_gpu_run_shows_what_only_gpus_can(backend, devices, extra, tmp_path_factory):
    require(backend, devices)
    record = recorded(gpu_run(tmp_path_factory, backend, devices, extra))
    twin = None
    if BACKENDS[backend].sharded and devices > 1:
        mirror = (BACKENDS[backend].replicated_twin, devices, checks.twin_options(extra))
        outcome = gpu_run(tmp_path_factory, *mirror)
        if outcome.record is None:
            pytest.fail(f"its replicated twin {case_name(*mirror)} made no record "
                        f"(exit {outcome.code}): {outcome.stderr[-2000:]}")
        twin = outcome.record
    found = checks.problems(record, extra, twin)
    assert not found, "\n".join(found)


@pytest.mark.parametrize("backend", GPU_ONLY)
def test_a_gpu_only_backend_trains_as_its_framework_single_device(backend, trajectory):
    """parbench parity's strategy check (its 10 steps on 2 devices against the single device's,
    loss curve and final weights) for a backend a CPU cannot run, so no CPU test compares it."""
    require(backend, 2)
    single = FRAMEWORKS[BACKENDS[backend].framework].single
    reference, ours = trajectory(single), trajectory(backend, devices=2)
    tolerance = FAMILIES["resnet"].strategy_tolerance  # run_trajectory's default family
    assert checks.loss_parity(reference[0], ours[0], tolerance) == []
    assert [c for c in compare_runs(f"{backend} x2 vs {single}", reference, ours, tolerance)
            if not c.ok] == []
