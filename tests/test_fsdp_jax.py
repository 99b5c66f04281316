"""jax-fsdp (parameters and optimizer state split along the mesh) against jax-sharded (the same
program with them replicated), each run in its own process: the same training for every model
family, each device holding half of every split array, the collectives read off the compiled
program, and what the record says about the placement. Against one device: tests/test_gpt.py
trains every parallel backend of the registry, jax-fsdp too."""

from __future__ import annotations

import re

import pytest

from conftest import parbench
from parbench.cli.parity import FAMILIES as PARITY_FAMILIES
from parbench.cli.parity import compare_runs
from parbench.frameworks.jax.footprint import collectives, shape_bytes

FAMILIES = ("resnet", "vit", "gpt")
# what every device holds whole of the optimizer state: Adam's step count, and the step count
# and learning rate of optax.inject_hyperparams (int32, int32, float32)
SCALARS = 3 * 4


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_sharded_state_trains_as_replicated(trajectory, family):
    replicated = trajectory("jax-sharded", devices=2, family=family, launcher="python")
    sharded = trajectory("jax-fsdp", devices=2, family=family, launcher="python")
    checks = compare_runs(f"jax-fsdp vs jax-sharded ({family})", replicated, sharded,
                          PARITY_FAMILIES[family].strategy_tolerance)
    assert all(check.ok for check in checks), checks


@pytest.mark.slow
def test_each_device_holds_half_of_every_split_array(trajectory):
    replica = trajectory("jax-sharded", devices=2, family="gpt", launcher="python")[0]
    shards = trajectory("jax-fsdp", devices=2, family="gpt", launcher="python")[0]
    whole = replica["metrics"]["state_bytes"][0]
    # every array of the GPT has an even axis, so every one is split: exactly half each
    assert any(re.match(r"(\d+) of \1 parameter arrays split over 2 devices", note)
               for note in shards["notes"]), shards["notes"]
    for device in shards["metrics"]["state_bytes"]:
        assert device == {"parameters": whole["parameters"] // 2, "gradients": 0,
                          "optimizer": (whole["optimizer"] - SCALARS) // 2 + SCALARS}
    # every gradient is reduced, and the loss; XLA's program reduces a little more (measured:
    # 16,388 bytes beyond the parameters here, see porting.md section 18.5); it gathers the
    # split parameters for the sharded program, the replicated one needs no gather
    moved = [record["metrics"]["communication"]["bytes"] for record in (replica, shards)]
    assert whole["parameters"] <= moved[0]["all-reduce"] <= 1.05 * whole["parameters"]
    assert "all-gather" not in moved[0]
    assert moved[1]["all-gather"] >= whole["parameters"]


HLO = """
  %all-gather.1 = f32[64,10]{0,1} all-gather(%bitcast.18), channel_id=3, dimensions={1}
  %all-reduce.3 = (f32[64]{0}, f32[64,64]{1,0}, f32[]) all-reduce(%a, %b, %c), channel_id=5
  %reduce-scatter = bf16[32,64]{1,0} reduce-scatter(%d), channel_id=6, dimensions={0}
  %all-gather-start = (f32[8]{0}, f32[16]{0}) all-gather-start(%e), channel_id=7
  %all-gather-done = f32[16]{0} all-gather-done(%all-gather-start)
  %wrapped_copy = f32[64,10]{1,0} fusion(%all-gather.1), kind=kLoop
"""


def test_collectives_are_counted_by_the_whole_tensor_each_combines():
    assert shape_bytes("(f32[64]{0}, f32[64,64]{1,0}, f32[])") == 4 * (64 + 64 * 64 + 1)
    moved = collectives(HLO, mesh_size=2)
    assert moved.bytes == {"all-gather": 4 * 64 * 10 + 4 * 16,  # an async one by its -done
                           "all-reduce": 4 * (64 + 64 * 64 + 1),
                           "reduce-scatter": 2 * 2 * 32 * 64}  # its result is 1/2 of the whole
    assert "compiled XLA program" in moved.method


def test_the_reshard_flag_is_refused_for_jax(tmp_path):
    done = parbench("run", "jax-fsdp", "--devices", "2", "--reshard-after-forward", "no",
                    "--out", str(tmp_path / "out"))
    assert done.returncode == 2
    assert "--reshard-after-forward no is not available for jax-fsdp" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
