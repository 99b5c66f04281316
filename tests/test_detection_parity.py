"""The detector trains alike on 1 and 2 devices in every framework: parity's centernet family
(10 AdamW steps of the no-norm detector on the faces, global batch 16), each framework's
representative data-parallel backend on 2 devices against its single backend. The forward
checks against torch (both modes, BatchNorm included) are every framework's
test_forward_matches_torch, through parity's FORWARD_CASES.

Not here: 10 steps of each framework against torch-single's. At this size they do not agree to
parity's 1e-4 in every framework: TensorFlow ends 2.5e-2 from torch on one tensor, JAX 4.5e-5
and Paddle 8.0e-5 (2026-12-04, AMD EPYC). float32 gradients that are sums of many cancelling
terms differ from float64 by up to 3e-3 relative in torch itself, and a ReLU input within 1e-6 of
0 flips a gradient's sign, which AdamW turns into a full lr-sized step; torch from weights
perturbed by 1e-7 drifts as far. ``parbench parity --model centernet`` shows the figures.
"""

from __future__ import annotations

import pytest

from conftest import needs
from parbench.cli.parity import FAMILIES, STRATEGY_TOLERANCE, compare_runs
from parbench.run.registry import BACKENDS as REGISTRY

pytestmark = [pytest.mark.slow, needs("torch")]

FAMILY = "centernet"
# each framework's single backend and the data-parallel backend its users would run on one
# machine (the headline's representatives)
BACKENDS = {"torch": ("torch-single", "torch-ddp"),
            "tensorflow": ("tf-single", "tf-mirrored"),
            "paddle": ("paddle-single", "paddle-launch"),
            "jax": ("jax-single", "jax-sharded")}


@pytest.mark.parametrize("framework", list(BACKENDS))
def test_two_devices_follow_one_on_the_detector(trajectory, framework):
    single, parallel = BACKENDS[framework]
    reason = REGISTRY[parallel].missing_reason()
    if reason is not None:
        pytest.skip(reason)
    found = trajectory(parallel, family=FAMILY, devices=2)
    assert found[0]["world_size"] == 2
    assert FAMILIES[FAMILY].strategy_tolerance == STRATEGY_TOLERANCE  # 5e-5, the issue's
    for check in compare_runs(f"{parallel} x2 vs {single}", trajectory(single, family=FAMILY),
                              found, STRATEGY_TOLERANCE):
        assert check.ok, check
    curve = found[0]["metrics"]["loss_curve"]
    assert len(curve) == 10 and curve[-1] < curve[0]  # it trained
