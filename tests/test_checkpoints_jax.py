"""JAX's checkpoints resume exactly (frameworks/jax/checkpoint.py, Orbax): for every JAX backend,
a 64-step run equals the same configuration resumed from its step-32 checkpoint, loss curve and
final weights bit for bit (XLA on CPU is deterministic at fixed threads, and the restored arrays
have the shardings the step was compiled for: one compilation, the same program). That holds
for jax-pmap's stacked state too, of which replica 0's copy is saved: the other device's
BatchNorm running statistics restart from device 0's, and nothing reads them.

A checkpoint of jax-fsdp's 2 devices (its parameters and AdamW moments split over them) resumes
on jax-single's 1, which Orbax reshards on load, within float32 rounding: measured 2.4e-7 on the
losses and 1.5e-8 on the weights, the same as jax-single's and jax-fsdp's own runs differ
(the gradient is summed over 2 devices in another order from step 2 on)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import needs, parbench, records_in

pytestmark = [pytest.mark.slow, needs("jax")]

# The resnet has BatchNorm (running statistics are state, per device under pmap) and AdamW
# keeps two moments and a step count; --clip-grad-norm 0.5 clips every step, and its count of
# clipped steps is state too: what a resume that restored only the weights would get wrong.
CASES = {
    "jax-single": ("--model", "mlp", "--optimizer", "sgd"),
    "jax-pmap": ("--model", "resnet", "--optimizer", "adamw"),
    "jax-sharded": ("--model", "mlp", "--optimizer", "sgd"),
    "jax-fsdp": ("--model", "mlp", "--optimizer", "adamw", "--clip-grad-norm", "0.5"),
    "jax-multiprocess": ("--model", "mlp", "--optimizer", "adamw"),
}
STEPS, EVERY = 64, 32


def _run(folder: Path, backend: str, case: tuple[str, ...], *extra: str,
         devices: int | None = None) -> tuple[dict, dict[str, np.ndarray]]:
    """An ok run's record and final weights."""
    folder.mkdir(exist_ok=True)
    weights = folder / "final.npz"
    devices = devices or (1 if backend == "jax-single" else 2)
    done = parbench("run", backend, "--devices", str(devices), "--dataset", "digits", *case,
                    "--steps", str(STEPS), "--global-batch", "32", *extra, "--out",
                    str(folder / "out"), "--save-weights", str(weights), cwd=folder)
    assert done.returncode == 0, done.stderr[-3000:]
    (record,) = records_in(folder / "out")
    assert record["status"] == "ok", record["error"]
    return record, dict(np.load(weights))


@pytest.fixture(scope="module")
def resumed(tmp_path_factory) -> dict:
    """backend -> (the whole run, its checkpoint folder, the run resumed from step 32)."""
    found = {}
    for backend, case in CASES.items():
        folder = tmp_path_factory.mktemp(backend)
        checkpoints = folder / "checkpoints"
        whole = _run(folder / "whole", backend, case, "--checkpoint-every", str(EVERY),
                     "--checkpoint-dir", str(checkpoints))
        again = _run(folder / "resumed", backend, case, "--resume-from",
                     str(checkpoints / f"step-{EVERY}"))
        found[backend] = (whole, checkpoints, again)
    return found


@pytest.mark.parametrize("backend", CASES)
def test_a_run_resumed_from_its_step_32_checkpoint_equals_the_whole_run(resumed, backend):
    (whole, whole_weights), checkpoints, (again, again_weights) = resumed[backend]
    losses = whole["metrics"]["loss_curve"]
    assert len(losses) == STEPS and again["steps"] == STEPS - EVERY
    assert again["metrics"]["loss_curve"] == losses[EVERY:]  # bit for bit
    for score in ("final_accuracy", "final_loss", "confusion_matrix"):  # the last evaluation's
        assert again["metrics"][score] == whole["metrics"][score], score
    assert losses[EVERY] != losses[0]  # it trained: not a curve that equals anything
    assert whole_weights.keys() == again_weights.keys()
    for name, tensor in whole_weights.items():
        assert np.array_equal(tensor, again_weights[name]), name
    # the restored state has the shardings the step was compiled for: no second compilation
    assert again["metrics"]["compiled_graphs"] == 1
    # a count the state carries from step 0: the resumed run's goes on from the checkpoint's
    assert again["metrics"]["clipped_steps"] == whole["metrics"]["clipped_steps"]
    manifest = json.loads((checkpoints / f"step-{EVERY}" / "parbench.json").read_text())
    assert np.allclose(manifest["losses"], losses[:EVERY], rtol=1e-12, atol=0)  # the record's
    assert manifest["run_id"] == whole["run_id"]
    assert [c["step"] for c in whole["checkpoints"]["written"]] == [32, 64]
    assert again["resumed"] == {"folder": str(checkpoints / f"step-{EVERY}"), "step": EVERY,
                                "run_id": whole["run_id"], "backend": backend,
                                "world_size": whole["world_size"]}


def test_the_clipped_steps_before_the_checkpoint_are_counted_after_it(resumed):
    (whole, _), _, (again, _) = resumed["jax-fsdp"]
    assert whole["metrics"]["clipped_steps"] == again["metrics"]["clipped_steps"] == STEPS


def test_the_sharded_checkpoint_of_2_devices_resumes_on_1(resumed, tmp_path):
    """Orbax reshards on load: jax-fsdp's split arrays, resumed by jax-single."""
    (whole, whole_weights), checkpoints, _ = resumed["jax-fsdp"]
    again, weights = _run(tmp_path, "jax-single", CASES["jax-fsdp"], "--resume-from",
                          str(checkpoints / f"step-{EVERY}"))
    curve = np.array(again["metrics"]["loss_curve"])
    assert np.allclose(curve, whole["metrics"]["loss_curve"][EVERY:], rtol=0, atol=1e-6)
    for name, tensor in whole_weights.items():
        assert np.allclose(tensor, weights[name], rtol=0, atol=1e-7), name
    assert again["resumed"]["backend"] == "jax-fsdp" and again["resumed"]["world_size"] == 2
