"""jax-multiprocess (one process per device joined by jax.distributed, gloo between them)
against jax-single and jax-sharded: jax-sharded's program over a mesh of both processes'
devices, each process feeding its own rows, so the same training. Its launcher's supervision
(a SIGKILLed or raising rank) is in test_lifetime.py, two loopback nodes in test_multinode.py."""

from __future__ import annotations

import pytest

from conftest import needs
from parbench.cli.parity import FAMILIES, STRATEGY_TOLERANCE, compare_runs

pytestmark = needs("jax")


def processes(trajectory, **overrides) -> tuple[dict, dict]:
    return trajectory("jax-multiprocess", devices=2, launcher="jax-distributed", **overrides)


@pytest.mark.slow
@pytest.mark.parametrize("family", ("resnet", "vit"))
def test_two_processes_train_as_one_device(trajectory, family):
    single = trajectory("jax-single", family=family)
    run = processes(trajectory, family=family)
    record = run[0]
    assert (record["world_size"], record["launcher"]) == (2, "jax-distributed")
    assert len(record["env"]["device_names"]) == 2  # each process reports its own device
    checks = compare_runs(f"jax-multiprocess x2 vs jax-single ({family})", single, run,
                          FAMILIES[family].strategy_tolerance)
    assert all(check.ok for check in checks), checks


@pytest.mark.slow
def test_batchnorm_per_device_and_evaluation_as_jax_sharded(trajectory):
    """With BatchNorm each device keeps its own statistics; evaluation and the export use
    device 0's, which process 1 gathers from process 0, and each process scores its part of
    the test set, the counts summed across processes. All of it equals jax-sharded's, where one
    process holds both devices."""
    sharded = trajectory("jax-sharded", devices=2, launcher="python", model="resnet")
    run = processes(trajectory, model="resnet")
    checks = compare_runs("jax-multiprocess vs jax-sharded (BatchNorm)", sharded, run,
                          STRATEGY_TOLERANCE)
    assert all(check.ok for check in checks), checks
    ours, theirs = run[0]["metrics"], sharded[0]["metrics"]
    assert ours["final_accuracy"] == theirs["final_accuracy"]
    assert ours["final_loss"] == pytest.approx(theirs["final_loss"], rel=STRATEGY_TOLERANCE)
