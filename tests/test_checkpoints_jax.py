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

import pytest
from resume_cases import (
    STEPS,
    assert_follows,
    assert_resumes_exactly,
    resumed_runs,
    run_case,
    step_folder,
)

from conftest import needs

pytestmark = [pytest.mark.slow, needs("jax")]

# The resnet has BatchNorm (running statistics are state, per device under pmap) and AdamW
# keeps two moments and a step count; --clip-grad-norm 0.5 clips every step, and its count of
# clipped steps is state too: what a resume that restored only the weights would get wrong.
CASES = {
    "jax-single": ("jax-single", "--model", "mlp", "--optimizer", "sgd"),
    "jax-pmap": ("jax-pmap", "--model", "resnet", "--optimizer", "adamw"),
    "jax-sharded": ("jax-sharded", "--model", "mlp", "--optimizer", "sgd"),
    "jax-fsdp": ("jax-fsdp", "--model", "mlp", "--optimizer", "adamw", "--clip-grad-norm", "0.5"),
    "jax-multiprocess": ("jax-multiprocess", "--model", "mlp", "--optimizer", "adamw"),
}


@pytest.fixture(scope="module")
def resumed(tmp_path_factory) -> dict:
    return resumed_runs(tmp_path_factory, CASES)


@pytest.mark.parametrize("backend", CASES)
def test_a_run_resumed_from_its_step_32_checkpoint_equals_the_whole_run(resumed, backend):
    assert_resumes_exactly(resumed[backend], backend)
    (whole, _), _, (again, _) = resumed[backend]
    # the restored state has the shardings the step was compiled for: no second compilation
    assert again["metrics"]["compiled_graphs"] == 1
    # a count the state carries from step 0: the resumed run's goes on from the checkpoint's
    assert again["metrics"]["clipped_steps"] == whole["metrics"]["clipped_steps"]


def test_the_clipped_steps_before_the_checkpoint_are_counted_after_it(resumed):
    (whole, _), _, (again, _) = resumed["jax-fsdp"]
    assert whole["metrics"]["clipped_steps"] == again["metrics"]["clipped_steps"] == STEPS


def test_the_sharded_checkpoint_of_2_devices_resumes_on_1(resumed, tmp_path):
    """Orbax reshards on load: jax-fsdp's split arrays, resumed by jax-single."""
    _, checkpoints, _ = resumed["jax-fsdp"]
    again = run_case(tmp_path, ("jax-single", *CASES["jax-fsdp"][1:]), "--resume-from",
                     step_folder(checkpoints))
    assert_follows(resumed["jax-fsdp"], again, losses_within=1e-6, weights_within=1e-7)
    assert again[0]["resumed"]["backend"] == "jax-fsdp"
    assert again[0]["resumed"]["world_size"] == 2
