"""torch's checkpoints resume exactly (frameworks/torch/checkpoint.py): for every torch backend,
a 64-step run equals the same configuration resumed from its step-32 checkpoint, loss curve and
final weights bit for bit (torch on CPU is deterministic at fixed threads). A checkpoint of 2
ranks (DCP's shards) resumes on 1 within float32 rounding: the gradient's sum is taken in
another order. A stop signal to a checkpointing run ends it as ``preempted`` with a last
checkpoint, every rank at the same step, and --resume-from finishes it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import needs, parbench, records_in
from parbench.results.segments import rows

pytestmark = [pytest.mark.slow, needs("torch")]

# The resnet has BatchNorm (running statistics are state too) and AdamW keeps two moments and
# a step count per tensor: what a resume that restored only the weights would get wrong. With
# --input native the rows come from torch's DataLoader (a DistributedSampler): 44 steps make an
# epoch of digits at batch 32, so the resumed run crosses into the loader's second epoch.
CASES = {
    "torch-single": ("torch-single", "--model", "mlp", "--optimizer", "sgd"),
    "torch-dp": ("torch-dp", "--model", "mlp", "--optimizer", "sgd"),
    "torch-ddp": ("torch-ddp", "--model", "resnet", "--optimizer", "adamw"),
    "torch-fsdp": ("torch-fsdp", "--model", "mlp", "--optimizer", "adamw"),
    "torch-ddp native": ("torch-ddp", "--model", "mlp", "--optimizer", "sgd", "--input",
                         "native"),
}
STEPS, EVERY = 64, 32


def _run(folder: Path, case: tuple[str, ...], *extra: str) -> tuple[dict, dict[str, np.ndarray]]:
    """An ok run's record and final weights."""
    folder.mkdir(exist_ok=True)
    weights = folder / "final.npz"
    backend, *options = case
    devices = 1 if backend in ("torch-single", "torch-dp") else 2
    done = parbench("run", backend, "--devices", str(devices), "--dataset", "digits", *options,
                    "--steps", str(STEPS), "--global-batch", "32", *extra, "--out",
                    str(folder / "out"), "--save-weights", str(weights), cwd=folder)
    assert done.returncode == 0, done.stderr[-3000:]
    (record,) = records_in(folder / "out")
    assert record["status"] == "ok", record["error"]
    return record, dict(np.load(weights))


@pytest.fixture(scope="module")
def resumed(tmp_path_factory) -> dict:
    """case -> (the whole run, its checkpoint folder, the run resumed from step 32)."""
    found = {}
    for label, case in CASES.items():
        folder = tmp_path_factory.mktemp(label.replace(" ", "-"))
        checkpoints = folder / "checkpoints"
        whole = _run(folder / "whole", case, "--checkpoint-every", str(EVERY),
                     "--checkpoint-dir", str(checkpoints))
        again = _run(folder / "resumed", case, "--resume-from",
                     str(checkpoints / f"step-{EVERY}"))
        found[label] = (whole, checkpoints, again)
    return found


@pytest.mark.parametrize("label", CASES)
def test_a_run_resumed_from_its_step_32_checkpoint_equals_the_whole_run(resumed, label):
    (whole, whole_weights), checkpoints, (again, again_weights) = resumed[label]
    losses = whole["metrics"]["loss_curve"]
    assert len(losses) == STEPS and again["steps"] == STEPS - EVERY
    assert again["metrics"]["loss_curve"] == losses[EVERY:]  # bit for bit
    for score in ("final_accuracy", "final_loss", "confusion_matrix"):  # the last evaluation's
        assert again["metrics"][score] == whole["metrics"][score], score
    assert losses[EVERY] != losses[0]  # it trained: not a curve that equals anything
    assert whole_weights.keys() == again_weights.keys()
    for name, tensor in whole_weights.items():
        assert np.array_equal(tensor, again_weights[name]), name
    manifest = json.loads((checkpoints / f"step-{EVERY}" / "parbench.json").read_text())
    assert np.allclose(manifest["losses"], losses[:EVERY], rtol=1e-12, atol=0)  # the record's
    assert manifest["run_id"] == whole["run_id"]
    assert [c["step"] for c in whole["checkpoints"]["written"]] == [32, 64]
    assert again["resumed"] == {"folder": str(checkpoints / f"step-{EVERY}"), "step": EVERY,
                                "run_id": whole["run_id"], "backend": CASES[label][0],
                                "world_size": whole["world_size"]}
    assert again["run_id"] != whole["run_id"]


def test_the_sharded_checkpoint_of_2_ranks_resumes_on_1(resumed, tmp_path):
    """DCP reshards on load: torch-fsdp's shards, resumed by torch-single."""
    (whole, whole_weights), checkpoints, _ = resumed["torch-fsdp"]
    again, weights = _run(tmp_path, ("torch-single", *CASES["torch-fsdp"][1:]),
                          "--resume-from", str(checkpoints / f"step-{EVERY}"))
    curve = np.array(again["metrics"]["loss_curve"])
    assert np.allclose(curve, whole["metrics"]["loss_curve"][EVERY:], rtol=0, atol=1e-6)
    for name, tensor in whole_weights.items():
        assert np.allclose(tensor, weights[name], rtol=0, atol=1e-6), name
    assert again["resumed"]["backend"] == "torch-fsdp" and again["resumed"]["world_size"] == 2


def test_a_checkpoint_of_another_configuration_or_at_the_end_is_refused(resumed, tmp_path):
    _, checkpoints, _ = resumed["torch-single"]
    other = parbench("run", *CASES["torch-single"], "--dataset", "digits",
                     "--steps", str(STEPS), "--global-batch", "64", "--resume-from",
                     str(checkpoints), "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert other.returncode == 2
    assert "global_batch 32 there, 64 here" in other.stderr
    done = parbench("run", *CASES["torch-single"], "--dataset", "digits",
                    "--steps", str(STEPS), "--global-batch", "32", "--resume-from",
                    str(checkpoints), "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert done.returncode == 2 and "step 64 is the end of the run's 64 steps" in done.stderr
    other_framework = parbench("run", "tf-single", "--dataset", "digits", "--steps",
                               str(STEPS), "--resume-from", str(checkpoints), cwd=tmp_path)
    assert other_framework.returncode == 2
    assert "written by torch-single (torch.save (get_state_dict)); a tensorflow backend " \
        "cannot read it" in other_framework.stderr
    assert not (tmp_path / "out").exists()


def test_a_stop_signal_preempts_the_run_with_a_checkpoint_and_resume_finishes_it(tmp_path):
    steps = 2000  # still running when the signal comes: about 3 s of steps, stopped near 200
    args = ["run", "torch-ddp", "--devices", "2", "--dataset", "digits", "--model", "mlp",
            "--steps", str(steps), "--global-batch", "32", "--checkpoint-every", "50",
            "--checkpoint-dir", str(tmp_path / "ck")]
    harness = subprocess.Popen([sys.executable, "-m", "parbench.cli", *args, "--out",
                                str(tmp_path / "first")], cwd=tmp_path,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (tmp_path / "ck" / "step-50").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    harness.send_signal(signal.SIGTERM)
    _, stderr = harness.communicate(timeout=120)
    assert harness.returncode == 128 + signal.SIGTERM, stderr
    (first,) = records_in(tmp_path / "first")
    assert first["status"] == "preempted" and first["metrics"] is None
    stopped = first["steps"]
    assert 50 <= stopped < steps
    assert first["error"].startswith(f"preempted by SIGTERM after step {stopped}; its "
                                     f"checkpoint is {tmp_path / 'ck' / f'step-{stopped}'}")
    assert first["checkpoints"]["written"][-1]["step"] == stopped  # both ranks wrote it
    manifest = json.loads((tmp_path / "ck" / f"step-{stopped}" / "parbench.json").read_text())
    assert len(manifest["losses"]) == stopped and manifest["world_size"] == 2

    done = parbench(*args, "--resume-from", str(tmp_path / "ck"), "--out",
                    str(tmp_path / "second"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (second,) = records_in(tmp_path / "second")
    assert second["status"] == "ok" and second["steps"] == steps - stopped
    assert second["resumed"]["run_id"] == first["run_id"]
    assert second["resumed"]["step"] == stopped
    joined = [{k: row[k] for k in ("segment", "steps", "status", "checkpoints")}
              for row in rows([second, first])]
    assert joined == [
        {"segment": 1, "steps": f"1-{stopped}", "status": "preempted",
         "checkpoints": ", ".join(str(s) for s in [*range(50, stopped, 50), stopped])},
        {"segment": 2, "steps": f"{stopped + 1}-{steps}", "status": "ok",
         "checkpoints": ", ".join(str(s) for s in range((stopped // 50 + 1) * 50, steps + 1,
                                                         50))}]
