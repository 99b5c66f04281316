"""Paddle's checkpoints resume exactly (frameworks/paddle/checkpoint.py): for paddle-single,
paddle-spawn and paddle-launch, a 64-step run equals the same configuration resumed from its
step-32 checkpoint, loss curve, final weights and test scores bit for bit (Paddle on CPU is
deterministic at fixed threads). Bit for bit is what catches a partial restore: resuming the
resnet's run with fresh AdamW accumulators gave a loss curve up to 0.014 from the whole run's,
and giving rank 1 rank 0's BatchNorm statistics left the losses and rank 0's weights equal but
moved the test loss by 1.2e-4 (measured, 2 ranks, paddle-spawn).

A checkpoint of 2 ranks resumes on 1 and one of 1 on 2, within float32 rounding (the gradient
is averaged across the ranks instead of taken over the whole batch): the model has no BatchNorm
there, which would make them different trainings (each rank normalises its half of the batch).
The optimizer's accumulators are keyed by structured names in the file, so a process whose
Paddle names its parameters otherwise (a model built twice) restores them: with Paddle's own
keys its first step fails.

Paddle only runs in subprocesses: the runs, and a script (CHECKS) that looks into a checkpoint
and restores one into a model built a second time, printing its findings as JSON.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from resume_cases import assert_follows, assert_resumes_exactly, resumed_runs, run_case, step_folder

from conftest import needs

pytestmark = [pytest.mark.slow, needs("paddle")]

# The resnet has BatchNorm, whose running statistics each DataParallel rank keeps for itself,
# and AdamW keeps two moments and two beta power accumulators per tensor; Momentum (sgd) its
# velocity: what a resume that restored only the weights would get wrong.
CASES = {
    "paddle-single": ("paddle-single", "--model", "mlp", "--optimizer", "sgd"),
    "paddle-spawn": ("paddle-spawn", "--model", "mlp", "--optimizer", "adamw"),
    "paddle-launch": ("paddle-launch", "--model", "resnet", "--optimizer", "adamw"),
}
# another number of ranks; measured, loss curve / weights: 2 -> 1 1.8e-7 / 1.5e-8 (a whole
# 2-rank run against a whole 1-rank one: 1.8e-7 / 3e-8), 1 -> 2 6e-8 / 6e-8
TOLERANCE = 1e-6

CHECKS = r'''
import json, sys
from pathlib import Path
import numpy as np, paddle
from paddle import nn
from parbench.frameworks.paddle import checkpoint

state = Path(sys.argv[1])  # paddle-launch's step-32 state: what each file holds
ranks = [{k: t.numpy() for k, t in paddle.load(str(state / f"rank{r}.pdstate"))[
    "statistics"].items()} for r in (0, 1)]
model = {k: t.numpy() for k, t in paddle.load(str(state / checkpoint.MODEL)).items()}
found = {"statistics": sorted(ranks[0]),
         "ranks_differ": max(float(np.abs(ranks[0][k] - ranks[1][k]).max()) for k in ranks[0]),
         "rank_0_is_the_model's": all(np.array_equal(ranks[0][k], model[k]) for k in ranks[0]),
         "accumulators": sorted({k.split("/")[1] for k in
                                 paddle.load(str(state / checkpoint.OPTIMIZER))})}


def built():
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1D(8), nn.ReLU(), nn.Linear(8, 3))
    trained = [p for p in model.parameters() if p.trainable]
    return model, paddle.optimizer.AdamW(parameters=trained)


def step(model, optimizer, i):
    rows = np.random.default_rng(i).normal(size=(16, 4)).astype("float32")
    model(paddle.to_tensor(rows)).square().mean().backward()
    optimizer.step()
    optimizer.clear_grad()


paddle.seed(0)
first, first_optimizer = built()
for i in range(3):
    step(first, first_optimizer, i)
checkpoint.save(Path(sys.argv[2]), first, first_optimizer, None, 0, "cpu")
paddles_keys = first_optimizer.state_dict()
again, again_optimizer = built()  # the same layers again: Paddle names them linear_2, linear_3
checkpoint.load(Path(sys.argv[2]), again, again_optimizer, None, 0, "cpu")
for i in (3, 4):
    step(first, first_optimizer, i)
    step(again, again_optimizer, i)
found["names"] = [first[0].weight.name, again[0].weight.name]
found["equal"] = all(np.array_equal(a.numpy(), b.numpy()) for a, b in
                     zip(first.state_dict().values(), again.state_dict().values()))
third, third_optimizer = built()
third_optimizer.set_state_dict(paddles_keys)  # Paddle's own keys, the names shifted again
try:
    step(third, third_optimizer, 3)
except AssertionError as err:
    found["paddles_keys"] = str(err)
print(json.dumps(found))
'''


@pytest.fixture(scope="module")
def resumed(tmp_path_factory) -> dict:
    return resumed_runs(tmp_path_factory, CASES)


@pytest.mark.parametrize("backend", CASES)
def test_a_run_resumed_from_its_step_32_checkpoint_equals_the_whole_run(resumed, backend):
    assert_resumes_exactly(resumed[backend], backend)  # each rank scores with its statistics


def test_each_rank_keeps_its_own_statistics_and_the_optimizer_state_its_names(resumed,
                                                                                tmp_path):
    """paddle.DataParallel broadcasts the buffers only when it wraps the model, so the ranks'
    BatchNorm statistics part; the optimizer's state, by structured name, restores into a
    model whose Paddle names moved, before its first step creates the accumulators."""
    _, checkpoints, _ = resumed["paddle-launch"]
    done = subprocess.run([sys.executable, "-c", CHECKS, f"{step_folder(checkpoints)}/state",
                           str(tmp_path / "state")], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert "stem.bn._mean" in found["statistics"] and "stem.bn.weight" not in found["statistics"]
    assert found["ranks_differ"] > 1e-3 and found["rank_0_is_the_model's"]
    assert found["accumulators"] == ["beta1_pow_acc_0", "beta2_pow_acc_0", "moment1_0",
                                     "moment2_0"]
    assert found["names"] == ["linear_0.w_0", "linear_2.w_0"] and found["equal"]
    assert found["paddles_keys"] == "Optimizer set error, linear_4.w_0_moment1_0 should in " \
        "state dict"


@pytest.mark.parametrize(("writer", "reader"), [("paddle-spawn", "paddle-single"),
                                               ("paddle-single", "paddle-spawn")])
def test_a_checkpoint_resumes_on_another_number_of_ranks(resumed, tmp_path, writer, reader):
    (whole, _), checkpoints, _ = resumed[writer]
    again = run_case(tmp_path, (reader, *CASES[writer][1:]), "--resume-from",
                     step_folder(checkpoints))
    assert_follows(resumed[writer], again, losses_within=TOLERANCE, weights_within=TOLERANCE)
    assert again[0]["resumed"]["backend"] == writer
    assert again[0]["resumed"]["world_size"] == whole["world_size"] != again[0]["world_size"]
