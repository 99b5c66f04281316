"""What the portable-checkpoint tests share (tests/test_portable_checkpoints.py): torch-single's
whole run and its portable step-32 checkpoint, a run of another framework that goes on from it
and its own portable checkpoint at step 48, a run resumed from a portable checkpoint, and what
makes a resumed run follow a whole one.

Two cases, each 64 steps on digits at global batch 32:

* sgd: the no-norm ResNet with the default SGD (lr 0.1, momentum 0.9, cosine): the momentum
  buffers carry over. Without BatchNorm, N devices train as one does, so the parallel backends
  resume from this case too.
* adamw: the ResNet with BatchNorm and AdamW (lr 1e-3): the moments, the step count of the bias
  correction and the running statistics carry over.

A run resumed in another framework follows torch-single's whole run within parity's tolerance
across frameworks (1e-4, relative to each tensor's largest value). Measured on 2 AMD EPYC vCPUs
(2026-12-04): 3.2e-7 (loss curves) and 9.4e-7 (weights) at most, the frameworks' own whole
runs up to 2.9e-7 and 2.5e-6 from torch's; a step count off by one in the bias correction ends
5.9e-3 away. With BatchNorm, SGD at lr 0.1 amplifies each framework's rounding beyond any
tolerance in 64 steps (jax-single's whole run ends 5.1e-3 from torch's), hence the no-norm
model for SGD, as parity's trajectories have it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from resume_cases import devices_of, run_case, step_folder

from conftest import parbench, shared_result
from parbench.cli.parity import TRAJECTORY_TOLERANCE, relative_difference

STEPS, AT, THEN = 64, 32, 48  # torch's checkpoint, then the other framework's
CASES = {"sgd": ("--model", "resnet-nonorm", "--optimizer", "sgd"),
         "adamw": ("--model", "resnet", "--optimizer", "adamw")}
SINGLE = {"torch": "torch-single", "tensorflow": "tf-single", "paddle": "paddle-single",
          "jax": "jax-single"}

Run = tuple[dict, dict[str, np.ndarray]]  # a record and its final weights


def convert(checkpoints: Path, step: int, backend: str) -> Path:
    """The step's checkpoint in ``checkpoints`` (written by ``backend``), converted."""
    portable = checkpoints.parent / f"portable-{step}"
    done = parbench("convert", step_folder(checkpoints, step), "--out", str(portable))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith(f"wrote {portable}: step {step} of {STEPS} of {backend}'s")
    return portable


def torch_run(tmp_path_factory, case: str) -> tuple[Run, Path]:
    """torch-single's whole run of ``case`` and its portable step-32 checkpoint, once per test
    session."""
    def compute() -> tuple[Run, Path]:
        folder = tmp_path_factory.mktemp(f"torch-{case}")
        run = run_case(folder / "whole", ("torch-single", *CASES[case]), "--checkpoint-every",
                       str(AT), "--checkpoint-dir", str(folder / "checkpoints"))
        return run, convert(folder / "checkpoints", AT, "torch-single")

    return shared_result(tmp_path_factory, ("portable-torch", case), compute)


def carried_on(tmp_path_factory, framework: str, case: str) -> tuple[Run, Path]:
    """torch-single's training of ``case`` gone on from its step 32 in ``framework``'s single
    backend to the end, and that run's own step-48 checkpoint, converted: once per session."""
    def compute() -> tuple[Run, Path]:
        _, portable = torch_run(tmp_path_factory, case)
        folder = tmp_path_factory.mktemp(f"{framework}-{case}")
        backend = SINGLE[framework]
        run = resumed_run(folder / "resumed", backend, case, portable, "--checkpoint-every",
                          str(THEN - AT), "--checkpoint-dir", str(folder / "checkpoints"))
        return run, convert(folder / "checkpoints", THEN, backend)

    return shared_result(tmp_path_factory, ("portable-carried", framework, case), compute)


def resumed_run(folder: Path, backend: str, case: str, portable: Path, *extra: str) -> Run:
    """``backend`` resumed from ``portable`` to the case's end (on 2 devices where it is
    parallel)."""
    record, weights = run_case(folder, (backend, *CASES[case]), "--resume-from", str(portable),
                               *extra)
    step = record["resumed"]["step"]
    assert record["resumed"]["folder"] == str(portable.resolve()) and step in (AT, THEN)
    assert record["steps"] == STEPS - step
    assert record["world_size"] == devices_of(backend)
    return record, weights


def differences(whole: Run, resumed: Run, statistics: bool = True) -> tuple[float, float]:
    """How far ``resumed`` ends from ``whole``: its loss curve against the whole run's losses of
    the same steps, and its worst final tensor (BatchNorm's running statistics too, if
    ``statistics``), each relative to the whole run's largest value (parity's measure)."""
    (record, weights), (again, again_weights) = whole, resumed
    step = again["resumed"]["step"]
    losses = relative_difference(np.array(record["metrics"]["loss_curve"][step:]),
                                 np.array(again["metrics"]["loss_curve"]))
    assert weights.keys() == again_weights.keys()
    worst = max(relative_difference(tensor, again_weights[name])
                for name, tensor in weights.items() if statistics or "running_" not in name)
    return losses, worst


def assert_follows(whole: Run, resumed: Run, statistics: bool = True) -> None:
    """``resumed`` follows ``whole`` within parity's tolerance across frameworks, and the whole
    run learned (a curve that stayed put would follow anything)."""
    losses, weights = differences(whole, resumed, statistics)
    curve = whole[0]["metrics"]["loss_curve"]
    assert curve[-1] < 0.8 * curve[0], curve
    assert losses <= TRAJECTORY_TOLERANCE, losses
    assert weights <= TRAJECTORY_TOLERANCE, weights
