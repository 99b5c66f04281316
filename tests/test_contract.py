"""The framework-free contract: spec, canonical weights, data order and sharding, schedule."""

from __future__ import annotations

import numpy as np
import pytest

from parbench.contract.batches import epoch_permutation, eval_slice, schedule, shard_slice
from parbench.contract.optim import OptimizerSpec, lr_at, scaled_lr
from parbench.contract.spec import (
    build_spec,
    parameter_count,
    parameters,
    spec_dict,
    spec_from_dict,
)
from parbench.contract.weights import check_weights, initial_weights, load_weights, save_weights


def test_parameter_counts_match_hand_counts():
    mlp = build_spec("mlp", (1, 8, 8), 10)
    assert parameter_count(mlp) == (64 * 128 + 128) + (128 * 64 + 64) + (64 * 10 + 10)
    nonorm = build_spec("resnet-nonorm", (3, 32, 32), 10)
    conv = lambda i, o, k: i * o * k * k  # noqa: E731
    expected = (conv(3, 8, 3) + 8  # stem with bias
                + 2 * (conv(8, 8, 3) + 8)  # block 0, identity shortcut
                + conv(8, 16, 3) + 16 + conv(16, 16, 3) + 16 + conv(8, 16, 1) + 16  # block 1
                + conv(16, 32, 3) + 32 + conv(32, 32, 3) + 32 + conv(16, 32, 1) + 32  # block 2
                + 32 * 10 + 10)
    assert parameter_count(nonorm) == expected
    resnet = build_spec("resnet", (3, 32, 32), 10)
    # BN replaces each conv bias by gamma and beta: one more trainable vector per conv.
    conv_widths = [8, 8, 8, 16, 16, 16, 32, 32, 32]
    assert parameter_count(resnet) == expected + sum(conv_widths)
    running = [n for n in parameters(resnet) if "running" in n]
    assert len(running) == 2 * len(conv_widths)


def test_spec_round_trips_through_json_form():
    for name in ("resnet", "resnet-nonorm", "mlp"):
        spec = build_spec(name, (3, 16, 16), 7)
        assert spec_from_dict(spec_dict(spec)) == spec


def test_canonical_weights_are_deterministic_per_seed_and_saved_exactly(tmp_path):
    spec = build_spec("resnet", (3, 32, 32), 10)
    first, again, other = (initial_weights(spec, s) for s in (3, 3, 4))
    check_weights(spec, first)
    assert all(np.array_equal(first[k], again[k]) for k in first)
    assert not np.array_equal(first["stem.conv.weight"], other["stem.conv.weight"])
    save_weights(tmp_path / "w.npz", first)
    loaded = load_weights(tmp_path / "w.npz")
    assert list(loaded) == list(first)
    assert all(np.array_equal(loaded[k], first[k]) and loaded[k].dtype == np.float32
               for k in first)
    fan_in = 3 * 3 * 3
    assert abs(first["stem.conv.weight"].std() - np.sqrt(2 / fan_in)) < 0.1 * np.sqrt(2 / fan_in)


def test_check_weights_names_the_mismatch():
    spec = build_spec("mlp", (1, 8, 8), 10)
    weights = initial_weights(spec, 0)
    weights["head.weight"] = np.zeros((3, 3), np.float32)
    with pytest.raises(ValueError, match="head.weight"):
        check_weights(spec, weights)


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("n,batch", [(96, 24), (100, 24), (4096, 128)])
def test_sharding_covers_each_sample_at_most_once_per_epoch(world, n, batch):
    batch -= batch % world  # the harness refuses indivisible batches
    per_epoch = n // batch
    seen = []
    for step in schedule(seed=7, n=n, global_batch=batch, total_steps=per_epoch):
        parts = [step.indices[shard_slice(batch, world, r)] for r in range(world)]
        assert [len(p) for p in parts] == [batch // world] * world
        assert np.array_equal(np.concatenate(parts), step.indices)  # contiguous, in rank order
        seen.extend(np.concatenate(parts))
    assert len(seen) == len(set(seen)) == per_epoch * batch
    # Tail rule: exactly the last n mod B rows of the epoch's permutation are left out.
    assert set(seen) == set(epoch_permutation(7, 0, n)[:per_epoch * batch])
    assert step.epoch_end


def test_order_is_deterministic_per_seed_and_changes_per_epoch():
    steps = lambda seed: [s.indices for s in schedule(seed, 100, 25, 8)]  # noqa: E731
    first, again, other = steps(1), steps(1), steps(2)
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert not np.array_equal(first[0], other[0])
    assert not np.array_equal(np.sort(first[0]), np.sort(first[4]))  # epoch 1 reshuffles


@pytest.mark.parametrize("n,world", [(1024, 2), (1000, 3), (7, 4), (360, 1)])
def test_eval_shards_partition_the_test_set(n, world):
    rows = np.concatenate([np.arange(n)[eval_slice(n, world, r)] for r in range(world)])
    assert np.array_equal(rows, np.arange(n))


def test_learning_rate_schedules():
    cosine = OptimizerSpec(lr=0.1, schedule="cosine", warmup_steps=2)
    assert lr_at(0, 12, cosine) == pytest.approx(0.05)
    assert lr_at(2, 12, cosine) == pytest.approx(0.1)
    assert lr_at(7, 12, cosine) == pytest.approx(0.05)
    assert lr_at(5, 10, OptimizerSpec(lr=0.1, schedule="constant")) == 0.1
    assert scaled_lr(0.1, 256, "linear") == pytest.approx(0.2)
    assert scaled_lr(0.1, 256, "none") == 0.1


def test_eval_slices_are_contiguous_in_rank_order_and_cover_the_test_set() -> None:
    assert [eval_slice(10, 3, rank) for rank in range(3)] == [
        slice(0, 3), slice(3, 7), slice(7, 10)]  # bounds 0, 3.33, 6.67, 10 rounded
    assert eval_slice(10, 1, 0) == slice(0, 10)


def test_warmup_rises_linearly_and_cosine_decays_over_the_steps_after_it() -> None:
    spec = OptimizerSpec(lr=0.4, warmup_steps=4)
    assert [lr_at(step, 8, spec) for step in range(4)] == pytest.approx([0.1, 0.2, 0.3, 0.4])
    assert [lr_at(step, 8, spec) for step in (4, 6)] == pytest.approx([0.4, 0.2])
    # one step after the warm-up: it takes the full rate (progress 0 of 1)
    assert lr_at(4, 5, spec) == pytest.approx(0.4)
    assert lr_at(5, 5, spec) == pytest.approx(0.0, abs=1e-12)
