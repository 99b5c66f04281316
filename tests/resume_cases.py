"""What the checkpoint tests of every framework share (tests/test_checkpoints_<framework>.py):
a case's whole run with a checkpoint every EVERY steps, the same configuration resumed from
its step-EVERY checkpoint, and what makes the two the same training."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from conftest import parbench, records_in
from parbench.run.registry import BACKENDS

STEPS, EVERY = 64, 32
SCORES = ("final_accuracy", "final_loss", "confusion_matrix")  # the last evaluation's

Case = tuple[str, ...]  # the backend, then its options
Runs = tuple[tuple[dict, dict[str, np.ndarray]], Path, tuple[dict, dict[str, np.ndarray]]]


def devices_of(backend: str) -> int:
    """2 where the backend trains on several devices here (torch-dp needs GPUs for that)."""
    found = BACKENDS[backend]
    return 2 if found.parallel and not found.gpu_for_parallel else 1


def run_case(folder: Path, case: Case, *extra: str,
             steps: int = STEPS) -> tuple[dict, dict[str, np.ndarray]]:
    """An ok run of ``case`` on digits at global batch 32: its record and final weights."""
    folder.mkdir(parents=True, exist_ok=True)
    backend, *options = case
    weights = folder / "final.npz"
    done = parbench("run", backend, "--devices", str(devices_of(backend)), "--dataset",
                    "digits", *options, "--steps", str(steps), "--global-batch", "32", *extra,
                    "--out", str(folder / "out"), "--save-weights", str(weights), cwd=folder)
    assert done.returncode == 0, done.stderr[-3000:]
    (record,) = records_in(folder / "out")
    assert record["status"] == "ok", record["error"]
    return record, dict(np.load(weights))


def step_folder(checkpoints: Path, step: int = EVERY) -> str:
    return str(checkpoints / f"step-{step}")


def resumed_runs(tmp_path_factory, cases: dict[str, Case]) -> dict[str, Runs]:
    """label -> (the whole run, its checkpoint folder, the run resumed from step EVERY)."""
    found = {}
    for label, case in cases.items():
        folder = tmp_path_factory.mktemp(label.replace(" ", "-"))
        checkpoints = folder / "checkpoints"
        whole = run_case(folder / "whole", case, "--checkpoint-every", str(EVERY),
                         "--checkpoint-dir", str(checkpoints))
        again = run_case(folder / "resumed", case, "--resume-from", step_folder(checkpoints))
        found[label] = (whole, checkpoints, again)
    return found


def assert_resumes_exactly(runs: Runs, backend: str) -> None:
    """The resumed run's loss curve, last evaluation and final weights are the whole run's,
    bit for bit; its checkpoint holds the whole run's losses before it, and the records say
    which run each continues and what each wrote."""
    (whole, whole_weights), checkpoints, (again, again_weights) = runs
    losses = whole["metrics"]["loss_curve"]
    assert len(losses) == STEPS and again["steps"] == STEPS - EVERY
    assert again["metrics"]["loss_curve"] == losses[EVERY:]
    assert losses[EVERY] != losses[0]  # it trained: not a curve that equals anything
    for score in SCORES:
        assert again["metrics"][score] == whole["metrics"][score], score
    assert whole_weights.keys() == again_weights.keys()
    for name, tensor in whole_weights.items():  # BatchNorm's running statistics too
        assert np.array_equal(tensor, again_weights[name]), name
    manifest = json.loads((checkpoints / f"step-{EVERY}" / "parbench.json").read_text())
    assert np.allclose(manifest["losses"], losses[:EVERY], rtol=1e-12, atol=0)  # the record's
    assert manifest["run_id"] == whole["run_id"] and manifest["api"] == BACKENDS[backend].checkpoint
    assert [c["step"] for c in whole["checkpoints"]["written"]] == [EVERY, STEPS]
    assert again["resumed"] == {"folder": step_folder(checkpoints), "step": EVERY,
                                "run_id": whole["run_id"], "backend": backend,
                                "world_size": whole["world_size"]}
    assert again["run_id"] != whole["run_id"]


def assert_follows(runs: Runs, other: tuple[dict, dict[str, np.ndarray]],
                   losses_within: float, weights_within: float) -> None:
    """``other``, resumed from the same checkpoint elsewhere (another device count), follows
    the whole run within the given absolute differences."""
    (whole, whole_weights), _, _ = runs
    again, weights = other
    curve = np.array(again["metrics"]["loss_curve"])
    assert np.allclose(curve, whole["metrics"]["loss_curve"][EVERY:], rtol=0, atol=losses_within)
    for name, tensor in whole_weights.items():
        assert np.allclose(tensor, weights[name], rtol=0, atol=weights_within), name
