"""Comparisons paired by round (parbench.results.paired): two rows of one sweep are compared by
their per-round ratios, so drift that moves a whole round cancels; rows of no common sweep, or
of fewer than 3 common rounds, fall back to their own intervals. Every figure by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from test_report import markdown_tables, record
from test_report_intervals import TITLE, on_cpu

from parbench.contract.tasks import TASKS
from parbench.results.intervals import t_interval
from parbench.results.paired import paired_ratio, tie, versus
from parbench.results.report import render
from parbench.results.rows import Row
from parbench.results.sequential import swept_interval
from parbench.run.modes import Modes

DRIFT = [0.7, 1.0, 1.3]  # the machine's speed, round by round: every configuration moves


def swept(rec: dict, sweep: str = "s1", position: int = 0) -> dict:
    rec["sweep"] = {"id": sweep, "order_seed": 1, "position": position}
    return rec


def row(speeds: list[float], sweep: str | None = "s1", backend: str = "torch-single") -> Row:
    runs = [record(backend, "torch", 1, i, speed) for i, speed in enumerate(speeds)]
    if sweep:
        runs = [swept(r, sweep) for r in runs]
    made = Row("torch", backend, 1, "python", 1, Modes(), runs, TASKS["image-classification"])
    made.cells = {"samples/s": float(np.median(speeds))}
    made.speed_ci = t_interval(speeds)
    return made


def test_drift_that_moves_a_round_cancels_in_the_paired_ratio():
    fast, slow = row([100 * d for d in DRIFT]), row([80 * d for d in DRIFT])
    paired = versus(fast, slow)
    assert paired.value == pytest.approx(1.25)
    assert paired.interval.high / paired.interval.low == pytest.approx(1.0)  # no noise left
    assert paired.interval.method == "paired t, 3 rounds"
    assert tie(fast, slow) is False
    # the same figures outside a sweep: each row's drift is its noise, and they tie
    alone = row([100 * d for d in DRIFT], sweep=None), row([80 * d for d in DRIFT], sweep=None)
    assert tie(*alone) is True and versus(*alone).interval.method == "t"


def test_the_paired_interval_is_students_t_on_the_rounds_log_ratios():
    ratios = [1.1, 1.2, 1.0, 1.15]
    a, b = row([100 * r for r in ratios]), row([100.0] * 4)
    logs = np.log(ratios)
    half = stats.t.ppf(0.975, 3) * logs.std(ddof=1) / 2
    found = paired_ratio(a, b, factor=2.0)  # a / (2 x b), as a scaling efficiency is taken
    assert found.value == pytest.approx(math.exp(logs.mean()) / 2, rel=1e-12)
    assert (found.interval.low, found.interval.high) == pytest.approx(
        (math.exp(logs.mean() - half) / 2, math.exp(logs.mean() + half) / 2), rel=1e-12)


def test_only_rounds_of_one_sweep_that_both_finished_are_paired():
    a, b = row([110.0, 120.0, 100.0]), row([100.0] * 3, sweep="another sweep")
    assert paired_ratio(a, b) is None  # no common sweep: each row's own interval
    assert versus(a, b).interval.method == "t"
    c = row([100.0, 100.0, 100.0, 100.0])
    c.runs[3]["status"], c.runs[3]["metrics"] = "failed", None
    d = row([110.0, 120.0, 100.0, 90.0])
    assert paired_ratio(d, c).interval.method == "paired t, 3 rounds"
    c.runs[2]["status"], c.runs[2]["metrics"] = "failed", None
    assert paired_ratio(d, c) is None  # 2 rounds left: no interval from 1 degree of freedom


def test_a_sweep_that_stopped_on_its_answers_is_read_at_its_rules_level():
    """compare --until-ci recorded the rounds it planned: the report's interval is the
    sequential rule's (wider than 95% t), so what compare stopped on is what it prints."""
    ratios = [1.1, 1.2, 1.0, 1.15]
    a, b = row([100 * r for r in ratios]), row([100.0] * 4)
    fixed = paired_ratio(a, b)
    for run in a.runs:
        run["sweep"]["max_rounds"] = 25
    swept = paired_ratio(a, b)
    expected = swept_interval(np.log(ratios), 25)
    assert (swept.interval.low, swept.interval.high) == pytest.approx(
        (expected.low, expected.high), rel=1e-12)
    assert swept.interval.low < fixed.interval.low and swept.interval.high > fixed.interval.high
    assert swept.interval.method == "paired sequential t, 4 rounds of at most 25"


def test_the_report_takes_scaling_efficiency_round_by_round():
    """torch-ddp x2 against torch-single x1, both moving with the machine's drift: the
    efficiency is exactly 150 / (2 x 100) with no width, which unpaired intervals could not
    say."""
    records = [on_cpu(swept(record("torch-single", "torch", 1, i, 100 * d)), 1)
               for i, d in enumerate(DRIFT)]
    records += [on_cpu(swept(record("torch-ddp", "torch", 2, i, 150 * d,
                                    launcher="torchrun"), position=1), 1)
                for i, d in enumerate(DRIFT)]
    tables = markdown_tables(render(records))
    performance = {line["backend"]: line for line in tables[(TITLE, "Performance")]}
    assert float(performance["torch-ddp"]["scaling eff."]) == pytest.approx(0.75, abs=1e-3)
    ddp = next(line for line in tables[("Headline", TITLE)] if line["devices"] == "2")
    assert ddp["scaling eff."] == "0.75 (0.75-0.75)"  # unpaired: 0.75 (0.26-2.2)
