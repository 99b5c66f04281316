"""The time-to-target table (parbench.results.time_to_target) on hand-made records whose every
figure is worked out here: medians over seeds, a missed target never shown as a time, ratios
taken seed by seed, the N-device row against its 1-device baseline."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from parbench.results.time_to_target import (
    NOT_REACHED,
    first_line,
    seed_ratio,
    time_to_target_rows,
)

TARGET = {"metric": "accuracy", "value": 0.9, "better": "higher", "evaluations": 6}


def record(backend: str, seed: int, time_s: float | None, devices: int = 1,
           throughput: float = 100.0, steps: int = 24, repeat: int = 0) -> dict:
    """A record of a run that aimed at accuracy 0.9 (None: it did not reach it)."""
    reached = time_s is not None
    return {
        "backend": backend, "world_size": devices, "launcher": "python" if devices == 1
        else "torchrun", "seed": seed, "repeat": repeat, "status": "ok", "model": "mlp",
        "dataset": "synthetic", "task": "image-classification", "batch_mode": "global",
        "global_batch": 32, "per_device_batch": 32 // devices, "lr": 0.1, "lr_scaling": "none",
        "optimizer": {"lr": 0.1, "momentum": 0.9}, "schema_version": 12,
        "config": {"steps": 40, "target": 0.9, "eval_every": 4},
        "metrics": {"throughput": throughput, "target": {
            **TARGET, "reached": reached, "time_s": time_s, "steps": steps if reached else None,
            "items": 32 * steps if reached else None}}}


def by_backend(rows: list[dict]) -> dict[tuple[str, int], dict]:
    return {(row["backend"], row["devices"]): row for row in rows}


def test_the_time_is_the_median_over_seeds_with_t_over_them():
    rows = time_to_target_rows([record("torch-single", s, t) for s, t in enumerate((10, 14, 11))])
    (row,) = rows
    logs = np.log([10, 14, 11])
    half = stats.t.ppf(0.975, 2) * logs.std(ddof=1) / math.sqrt(3)
    low, high = np.exp(logs.mean() - half), np.exp(logs.mean() + half)
    assert row["time to target s"] == f"11 ({low:.3g}-{high:.3g})"
    assert (row["runs reached"], row["seeds"], row["steps to target"]) == ("3/3", 3, 24)
    assert row["to target"] == "768 samples" and row["target"] == "accuracy >= 0.9, every 4 steps"


def test_a_missed_target_is_never_shown_as_a_time():
    mostly_missed = [record("torch-single", 0, 10.0), record("torch-single", 1, None),
                     record("torch-single", 2, None)]
    (row,) = time_to_target_rows(mostly_missed)
    assert row["time to target s"] == NOT_REACHED and row["runs reached"] == "1/3"
    # one seed missed: the median lands on a seed that reached it, with no interval
    (row,) = time_to_target_rows([record("torch-single", 0, 10.0),
                                  record("torch-single", 1, 12.0),
                                  record("torch-single", 2, None)])
    assert row["time to target s"] == "12" and row["runs reached"] == "2/3"
    assert first_line(time_to_target_rows(mostly_missed)) == (
        "Time to target: mlp on synthetic, accuracy >= 0.9, every 4 steps, 1 device(s): "
        "not reached.")


def test_a_seed_is_the_median_of_its_repeats():
    runs = [record("torch-single", 0, t, repeat=r) for r, t in enumerate((10.0, 30.0, 11.0))]
    (row,) = time_to_target_rows(runs)
    assert row["time to target s"] == "11" and row["seeds"] == 1


def test_rows_are_compared_seed_by_seed():
    """tf is 1.1 times torch's time on every seed: paired, the ratio is exactly 1.1 with no
    spread, though the times themselves spread 10 to 30 s; the records' order does not pair
    them."""
    torch = [record("torch-single", s, t) for s, t in enumerate((10.0, 20.0, 30.0))]
    tf = [record("tf-single", s, 1.1 * t) for s, t in reversed(list(enumerate((10.0, 20.0,
                                                                               30.0))))]
    rows = time_to_target_rows(torch + tf)
    assert [row["backend"] for row in rows] == ["torch-single", "tf-single"]  # fastest first
    assert by_backend(rows)[("tf-single", 1)]["vs first"] == "1.1 (1.1-1.1)"
    assert by_backend(rows)[("torch-single", 1)]["vs first"] == "1 (1-1)"
    assert first_line(rows) == (
        "Time to target: mlp on synthetic, accuracy >= 0.9, every 4 steps, 1 device(s): "
        f"torch-single first in {rows[0]['time to target s']} s, next tf-single x1.1 (1.1-1.1).")


def test_seed_ratios_need_a_shared_finite_seed_and_three_for_an_interval():
    assert seed_ratio({0: 2.0}, {1: 1.0}) is None
    assert seed_ratio({0: 2.0, 1: math.inf}, {0: 1.0, 1: 1.0}).interval is None
    two = seed_ratio({0: 2.0, 1: 8.0}, {0: 1.0, 1: 2.0})
    assert two.value == pytest.approx(math.sqrt(2 * 4)) and two.interval is None


def test_n_devices_against_one_take_items_speed_and_time_apart():
    """2 devices: the same global batch, so the same samples to target; steps 1.6 times as
    fast; so the target 1/1.6 of the time, seed by seed."""
    single = [record("torch-single", s, t, throughput=100.0) for s, t in enumerate((10., 12.,
                                                                                   14.))]
    ddp = [record("torch-ddp", s, t / 1.6, devices=2, throughput=160.0)
           for s, t in enumerate((10., 12., 14.))]
    row = by_backend(time_to_target_rows(single + ddp))[("torch-ddp", 2)]
    assert (row["vs 1-dev: items"], row["vs 1-dev: items/s"]) == ("1", "1.6")
    assert row["vs 1-dev: time"] == "0.625 (0.625-0.625)"
    assert by_backend(time_to_target_rows(single + ddp))[("torch-single", 1)][
        "vs 1-dev: time"] is None
