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

import pytest
from resume_cases import (
    STEPS,
    assert_follows,
    assert_resumes_exactly,
    resumed_runs,
    run_case,
    step_folder,
)

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


@pytest.fixture(scope="module")
def resumed(tmp_path_factory) -> dict:
    return resumed_runs(tmp_path_factory, CASES)


@pytest.mark.parametrize("label", CASES)
def test_a_run_resumed_from_its_step_32_checkpoint_equals_the_whole_run(resumed, label):
    assert_resumes_exactly(resumed[label], CASES[label][0])


def test_the_sharded_checkpoint_of_2_ranks_resumes_on_1(resumed, tmp_path):
    """DCP reshards on load: torch-fsdp's shards, resumed by torch-single."""
    _, checkpoints, _ = resumed["torch-fsdp"]
    again = run_case(tmp_path, ("torch-single", *CASES["torch-fsdp"][1:]), "--resume-from",
                     step_folder(checkpoints))
    assert_follows(resumed["torch-fsdp"], again, losses_within=1e-6, weights_within=1e-6)
    assert again[0]["resumed"]["backend"] == "torch-fsdp"
    assert again[0]["resumed"]["world_size"] == 2


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
