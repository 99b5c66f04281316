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

import pytest
from resume_cases import (
    EVERY,
    STEPS,
    assert_follows,
    assert_resumes_exactly,
    resumed_runs,
    run_case,
    step_folder,
)

from conftest import needs, parbench

pytestmark = [pytest.mark.slow, needs("tensorflow")]

# The resnet has BatchNorm (its running statistics are state too, and Keras 3's lists of
# layers hide them from tf.train.Checkpoint(model=model)) and AdamW keeps two moments per
# tensor and a step count: what a resume of the weights alone would get wrong. tf-multiworker
# saves from every worker and keeps the chief's files. With --input native the rows come from
# tf.data: 44 steps make an epoch of digits at batch 32, so the resumed run crosses into the
# pipeline's second shuffle.
CASES = {
    "tf-single": ("tf-single", "--model", "mlp", "--optimizer", "sgd", "--input", "native"),
    "tf-mirrored": ("tf-mirrored", "--model", "mlp", "--optimizer", "adamw"),
    "tf-multiworker": ("tf-multiworker", "--model", "resnet", "--optimizer", "adamw"),
}


@pytest.fixture(scope="module")
def resumed(tmp_path_factory) -> dict:
    return resumed_runs(tmp_path_factory, CASES)


@pytest.mark.parametrize("backend", CASES)
def test_a_run_resumed_from_its_step_32_checkpoint_equals_the_whole_run(resumed, backend):
    assert_resumes_exactly(resumed[backend], backend)
    _, checkpoints, _ = resumed[backend]
    manifest = json.loads((checkpoints / f"step-{EVERY}" / "parbench.json").read_text())
    # one TensorFlow checkpoint, the chief's (the other worker's copy went to a folder of its
    # own), and the other worker's BatchNorm statistics
    own = ["state/worker1/statistics.data-00000-of-00001", "state/worker1/statistics.index"]
    assert sorted(manifest["files"]) == ["state/checkpoint", "state/ckpt-1.data-00000-of-00001",
                                         "state/ckpt-1.index",
                                         *(own if backend == "tf-multiworker" else [])]


def test_the_mirrored_checkpoint_of_2_devices_resumes_on_1(resumed, tmp_path):
    """A mirrored variable is saved once and restored into however many copies: tf-mirrored's
    2-device checkpoint, resumed by tf-single."""
    _, checkpoints, _ = resumed["tf-mirrored"]
    again = run_case(tmp_path, ("tf-single", *CASES["tf-mirrored"][1:]), "--resume-from",
                     step_folder(checkpoints))
    assert_follows(resumed["tf-mirrored"], again, losses_within=1e-6, weights_within=1e-6)
    assert again[0]["resumed"]["backend"] == "tf-mirrored"
    assert again[0]["resumed"]["world_size"] == 2


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
