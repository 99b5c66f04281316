"""The detector trains alike in every framework and on 1 and 2 devices: parity's centernet
family. Each framework's single backend follows torch-single over 10 plain SGD steps of the
no-norm detector on the faces (loss curve 1e-4, final weights 1e-2: why not 1e-4 is in parity's
FAMILIES), and its representative data-parallel backend on 2 devices follows its single backend
over 10 AdamW steps (5e-5). The forward checks against torch (both modes, BatchNorm included)
are every framework's test_forward_matches_torch, through parity's FORWARD_CASES.
"""

from __future__ import annotations

import pytest

from conftest import needs
from parbench.cli.parity import (
    FAMILIES,
    STRATEGY_TOLERANCE,
    TRAJECTORY_TOLERANCE,
    compare_runs,
)
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


@pytest.mark.parametrize("framework", [name for name in BACKENDS if name != "torch"])
def test_ten_steps_follow_torch_single_on_the_detector(trajectory, framework):
    single = BACKENDS[framework][0]
    reason = REGISTRY[single].missing_reason()
    if reason is not None:
        pytest.skip(reason)
    family = FAMILIES[FAMILY]
    assert family.across == {"optimizer": "sgd", "momentum": 0.0, "lr": 1e-4}
    found = trajectory(single, family=FAMILY, **family.across)
    assert (found[0]["optimizer"]["momentum"], found[0]["lr"]) == (0.0, 1e-4)  # plain SGD
    checks = compare_runs(f"{single} vs torch-single",
                          trajectory("torch-single", family=FAMILY, **family.across), found,
                          weights_tolerance=family.weights_tolerance)
    # the loss curve at parity's 1e-4, the weights at the family's 1e-2
    assert [c.tolerance for c in checks] == [TRAJECTORY_TOLERANCE, 1e-2]
    for check in checks:
        assert check.ok, check
