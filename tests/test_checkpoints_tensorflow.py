"""TensorFlow's checkpoints resume exactly (frameworks/tensorflow/checkpoint.py): for every
custom-loop backend, a 64-step run equals the same configuration resumed from its step-32
checkpoint, loss curve, last evaluation and final weights bit for bit (TensorFlow 2.21 on CPU
gave equal bits for a run and its resume in every case here, so no tolerance is needed). A
tf-mirrored checkpoint of 2 devices resumes on tf-single within float32 rounding: measured
1.2e-7 on the loss and 2.2e-8 on the weights, the size of the difference between a whole
tf-mirrored and a whole tf-single run (2.4e-7, 3.0e-8), since the replicas' gradients are
summed in another order. tf-mirrored-keras (model.fit) writes none: it is refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import needs, parbench, records_in

pytestmark = [pytest.mark.slow, needs("tensorflow")]

# The resnet has BatchNorm (its running statistics are state too, and Keras 3's lists of
# layers hide them from tf.train.Checkpoint(model=model)) and AdamW keeps two moments per
# tensor and a step count: what a resume of the weights alone would get wrong. tf-multiworker
# saves from every worker and keeps the chief's files. With --input native the rows come from
# tf.data: 44 steps make an epoch of digits at batch 32, so the resumed run crosses into the
# pipeline's second shuffle.
CASES = {
    "tf-single": ("--model", "mlp", "--optimizer", "sgd", "--input", "native"),
    "tf-mirrored": ("--model", "mlp", "--optimizer", "adamw"),
    "tf-multiworker": ("--model", "resnet", "--optimizer", "adamw"),
}
STEPS, EVERY = 64, 32


def _run(folder: Path, backend: str, case: tuple[str, ...], *extra: str,
         devices: int | None = None) -> tuple[dict, dict[str, np.ndarray]]:
    """An ok run's record and final weights."""
    folder.mkdir(exist_ok=True)
    weights = folder / "final.npz"
    devices = devices or (1 if backend == "tf-single" else 2)
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
    for name, tensor in whole_weights.items():  # BatchNorm's running statistics too
        assert np.array_equal(tensor, again_weights[name]), name
    manifest = json.loads((checkpoints / f"step-{EVERY}" / "parbench.json").read_text())
    assert np.allclose(manifest["losses"], losses[:EVERY], rtol=1e-12, atol=0)  # the record's
    assert manifest["run_id"] == whole["run_id"]
    # one TensorFlow checkpoint, the chief's (the other worker's copy went to a folder of its
    # own), and the other worker's BatchNorm statistics
    own = ["state/worker1/statistics.data-00000-of-00001", "state/worker1/statistics.index"]
    assert sorted(manifest["files"]) == ["state/checkpoint", "state/ckpt-1.data-00000-of-00001",
                                         "state/ckpt-1.index",
                                         *(own if backend == "tf-multiworker" else [])]
    assert [c["step"] for c in whole["checkpoints"]["written"]] == [32, 64]
    assert again["resumed"] == {"folder": str(checkpoints / f"step-{EVERY}"), "step": EVERY,
                                "run_id": whole["run_id"], "backend": backend,
                                "world_size": whole["world_size"]}
    assert again["run_id"] != whole["run_id"]


def test_the_mirrored_checkpoint_of_2_devices_resumes_on_1(resumed, tmp_path):
    """A mirrored variable is saved once and restored into however many copies: tf-mirrored's
    2-device checkpoint, resumed by tf-single."""
    (whole, whole_weights), checkpoints, _ = resumed["tf-mirrored"]
    again, weights = _run(tmp_path, "tf-single", CASES["tf-mirrored"], "--resume-from",
                          str(checkpoints / f"step-{EVERY}"))
    curve = np.array(again["metrics"]["loss_curve"])
    assert np.allclose(curve, whole["metrics"]["loss_curve"][EVERY:], rtol=0, atol=1e-6)
    for name, tensor in whole_weights.items():
        assert np.allclose(tensor, weights[name], rtol=0, atol=1e-6), name
    assert again["resumed"]["backend"] == "tf-mirrored" and again["resumed"]["world_size"] == 2


def test_keras_fit_writes_no_checkpoints(tmp_path):
    """tf-mirrored-keras is refused before anything starts: Keras 3's BackupAndRestore resumes
    fit at the start of an epoch, and its fit is one epoch of the run's steps."""
    done = parbench("run", "tf-mirrored-keras", "--dataset", "digits", "--steps", str(STEPS),
                    "--checkpoint-every", str(EVERY), "--checkpoint-dir", str(tmp_path / "ck"),
                    "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert done.returncode == 2
    assert "tf-mirrored-keras writes no checkpoints yet" in done.stderr
    writing = done.stderr.split("the backends that do: ")[1].strip().rstrip(")").split(", ")
    assert set(CASES) <= set(writing) and "tf-mirrored-keras" not in writing
    assert not (tmp_path / "out").exists() and not (tmp_path / "ck").exists()
