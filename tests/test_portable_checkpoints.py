"""Training carried from one framework to another through portable checkpoints (parbench
convert, tests/portable_cases.py): torch-single's 32 steps resumed in TensorFlow, Paddle and
JAX for 32 more, and each of those runs' step-48 checkpoint resumed in torch for the last 16,
follow torch-single's 64 steps within parity's tolerance, with SGD-momentum and with AdamW;
a parallel backend of each framework resumes from a portable checkpoint too, and torch-single
from its own bit for bit (torch's state is the contract's: nothing is mapped)."""

from __future__ import annotations

import numpy as np
import pytest
from portable_cases import AT, CASES, assert_follows, carried_on, resumed_run, torch_run

from conftest import needs

pytestmark = [pytest.mark.slow, needs("torch")]  # torch-single is the reference

OTHERS = [pytest.param(framework, marks=needs(framework))
          for framework in ("tensorflow", "paddle", "jax")]
# one per framework, the sharded ones where there are: their loads differ most from one device's
PARALLEL = {"torch": "torch-fsdp", "tensorflow": "tf-mirrored", "paddle": "paddle-launch",
            "jax": "jax-fsdp"}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("framework", OTHERS)
def test_torch_training_goes_on_in_another_framework(tmp_path_factory, tmp_path, framework,
                                                     case):
    whole, _ = torch_run(tmp_path_factory, case)
    assert_follows(whole, carried_on(tmp_path_factory, framework, case)[0])


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("framework", OTHERS)
def test_another_frameworks_training_goes_on_in_torch(tmp_path_factory, tmp_path, framework,
                                                      case):
    whole, _ = torch_run(tmp_path_factory, case)
    _, portable = carried_on(tmp_path_factory, framework, case)
    assert_follows(whole, resumed_run(tmp_path, "torch-single", case, portable))


@pytest.mark.parametrize("case", CASES)
def test_torch_single_resumes_its_own_portable_checkpoint_bit_for_bit(tmp_path_factory,
                                                                      tmp_path, case):
    whole, portable = torch_run(tmp_path_factory, case)
    record, weights = resumed_run(tmp_path, "torch-single", case, portable)
    assert record["metrics"]["loss_curve"] == whole[0]["metrics"]["loss_curve"][AT:]
    for name, tensor in whole[1].items():  # BatchNorm's running statistics too
        assert np.array_equal(tensor, weights[name]), name


@pytest.mark.parametrize("backend", [pytest.param(backend, marks=needs(framework))
                                     for framework, backend in PARALLEL.items()])
def test_the_parallel_backends_resume_from_a_portable_checkpoint(tmp_path_factory, tmp_path,
                                                                 backend):
    whole, portable = torch_run(tmp_path_factory, "sgd")
    assert_follows(whole, resumed_run(tmp_path, backend, "sgd", portable))
