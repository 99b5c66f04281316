"""The fast lane's case of each framework's checkpoints: its single backend, 4 AdamW steps,
equals 2 steps resumed from the step-2 checkpoint for 2 more, loss curve and final weights bit
for bit. Every backend's 64-step case, the rank changes and preemption are the slow lane's
(tests/test_checkpoints_<framework>.py)."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import needs, parbench, records_in

SINGLE = {"torch": "torch-single", "tensorflow": "tf-single", "paddle": "paddle-single",
          "jax": "jax-single"}


def _run(folder, backend: str, *extra: str) -> tuple[dict, dict[str, np.ndarray]]:
    done = parbench("run", backend, "--dataset", "digits", "--model", "mlp", "--optimizer",
                    "adamw", "--steps", "4", "--global-batch", "32", *extra, "--out",
                    str(folder / "out"), "--save-weights", str(folder / "w.npz"), cwd=folder)
    assert done.returncode == 0, done.stderr[-3000:]
    (record,) = records_in(folder / "out")
    assert record["status"] == "ok", record["error"]
    return record, dict(np.load(folder / "w.npz"))


@pytest.mark.parametrize("framework", [pytest.param(f, marks=needs(f)) for f in SINGLE])
def test_the_single_backend_resumes_bit_for_bit(tmp_path, framework):
    (tmp_path / "whole").mkdir()
    (tmp_path / "resumed").mkdir()
    whole, weights = _run(tmp_path / "whole", SINGLE[framework], "--checkpoint-every", "2",
                          "--checkpoint-dir", str(tmp_path / "ck"))
    again, resumed = _run(tmp_path / "resumed", SINGLE[framework], "--resume-from",
                          str(tmp_path / "ck" / "step-2"))
    losses = whole["metrics"]["loss_curve"]
    assert again["metrics"]["loss_curve"] == losses[2:] and losses[2] != losses[0]
    assert [w["step"] for w in whole["checkpoints"]["written"]] == [2, 4]
    assert weights.keys() == resumed.keys()
    for name, tensor in weights.items():
        assert np.array_equal(tensor, resumed[name]), name
