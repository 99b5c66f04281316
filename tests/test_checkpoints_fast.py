"""The fast lane's case of each framework's checkpoints: its single backend, 4 AdamW steps,
equals 2 steps resumed from the step-2 checkpoint for 2 more, loss curve and final weights bit
for bit. Every backend's 64-step case, the rank changes and preemption are the slow lane's
(tests/test_checkpoints_<framework>.py)."""

from __future__ import annotations

import numpy as np
import pytest
from resume_cases import run_case, step_folder

from conftest import needs

SINGLE = {"torch": "torch-single", "tensorflow": "tf-single", "paddle": "paddle-single",
          "jax": "jax-single"}


@pytest.mark.parametrize("framework", [pytest.param(f, marks=needs(f)) for f in SINGLE])
def test_the_single_backend_resumes_bit_for_bit(tmp_path, framework):
    case = (SINGLE[framework], "--model", "mlp", "--optimizer", "adamw")
    whole, weights = run_case(tmp_path / "whole", case, "--checkpoint-every", "2",
                              "--checkpoint-dir", str(tmp_path / "ck"), steps=4)
    again, resumed = run_case(tmp_path / "resumed", case, "--resume-from",
                              step_folder(tmp_path / "ck", 2), steps=4)
    losses = whole["metrics"]["loss_curve"]
    assert again["metrics"]["loss_curve"] == losses[2:] and losses[2] != losses[0]
    assert [w["step"] for w in whole["checkpoints"]["written"]] == [2, 4]
    assert weights.keys() == resumed.keys()
    for name, tensor in weights.items():
        assert np.array_equal(tensor, resumed[name]), name
