"""A ratio of two figures with 95% intervals (parbench.results.intervals.ratio): the value,
and an interval whose log half-width is the two half-widths added in quadrature, made by t
only where both sides were; none where either side has none."""

from __future__ import annotations

import math

import pytest

from parbench.results.intervals import Interval, ratio


def test_a_ratio_adds_the_log_half_widths_in_quadrature():
    top = Interval(100 / math.e ** 0.3, 100 * math.e ** 0.3, "t, 3 repeats")
    bottom = Interval(50 / math.e ** 0.4, 50 * math.e ** 0.4, "t, 5 repeats")
    found = ratio(100.0, top, 50.0, bottom)
    assert found.value == 2.0
    assert found.interval.log_half_width == pytest.approx(0.5)  # hypot(0.3, 0.4)
    assert found.interval.low == pytest.approx(2 / math.e ** 0.5)
    assert found.interval.high == pytest.approx(2 * math.e ** 0.5)
    assert found.interval.method == "t" and found.text() == "2 (1.21-3.3)"


def test_a_bootstrap_side_makes_a_bootstrap_ratio_and_a_missing_side_none():
    t = Interval(9.0, 11.0, "t, 3 repeats")
    boot = Interval(9.0, 11.0, "bootstrap of 20 steps")
    assert ratio(10.0, t, 10.0, boot).interval.method == "bootstrap"
    assert ratio(10.0, boot, 10.0, t).interval.method == "bootstrap"
    assert ratio(3.0, None, 2.0, t).interval is None
    assert ratio(3.0, t, 2.0, None).interval is None and ratio(3.0, t, 2.0, None).text() == "1.5"
