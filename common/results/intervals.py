"""95% confidence intervals of a row's speed, and what they let the report say: a ratio between
two rows with its interval, and whether two rows are a tie.

Over 3 or more ok repeats the interval is Student's t on the log of each repeat's figure (so
it is an interval of the geometric mean, and a ratio of two is symmetric on the log scale).
With 1 or 2 repeats there is no run-to-run spread to speak of, so the steady steps are
bootstrapped within each run instead (records of schema 10 keep each step's time); that
interval knows nothing of run-to-run variation, and says so in its method. Older records with
fewer than 3 repeats get no interval."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

LEVEL = 0.95
REPEATS_FOR_T = 3
BOOTSTRAP_RESAMPLES = 2000
# a fixed seed: the same records always give the same report
BOOTSTRAP_SEED = 0


@dataclass(frozen=True)
class Interval:
    low: float
    high: float
    method: str  # how it was made, as the report says it ("t, 3 repeats")

    @property
    def log_half_width(self) -> float:
        return (math.log(self.high) - math.log(self.low)) / 2

    def scaled(self, factor: float) -> Interval:
        return Interval(self.low * factor, self.high * factor, self.method)

    def text(self) -> str:
        return f"{_short(self.low)}-{_short(self.high)}"


def _short(value: float) -> str:
    return np.format_float_positional(value, precision=3, unique=False, fractional=False,
                                      trim="-")


def t_interval(values: Sequence[float]) -> Interval:
    """Student's t interval of the geometric mean of ``values`` (3 or more, all > 0)."""
    # imported here: scipy.stats takes 0.6 s to import, more than half of every parbench
    # command's start, and only a report of 3+ repeats needs it
    from scipy import stats

    logs = np.log(np.asarray(values, dtype=float))
    half = stats.t.ppf(0.5 + LEVEL / 2, len(logs) - 1) * logs.std(ddof=1) / math.sqrt(len(logs))
    centre = logs.mean()
    return Interval(math.exp(centre - half), math.exp(centre + half),
                    f"t, {len(logs)} repeats")


def bootstrap_step_interval(runs_steps_ms: Sequence[Sequence[float]]) -> Interval:
    """Percentile bootstrap of the median step time: each resample draws every run's steady
    steps with replacement, takes each run's median and their geometric mean."""
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    logs = np.zeros(BOOTSTRAP_RESAMPLES)
    for steps in runs_steps_ms:
        steps = np.asarray(steps, dtype=float)
        draws = rng.integers(0, len(steps), (BOOTSTRAP_RESAMPLES, len(steps)))
        logs += np.log(np.median(steps[draws], axis=1))
    logs /= len(runs_steps_ms)
    tail = (1 - LEVEL) / 2 * 100
    low, high = np.exp(np.percentile(logs, [tail, 100 - tail]))
    steps_each = "/".join(str(len(steps)) for steps in runs_steps_ms)
    return Interval(float(low), float(high),
                    f"bootstrap, {steps_each} steps of {len(runs_steps_ms)} run(s)")


def step_interval(metrics: list[dict]) -> Interval | None:
    """The interval of the median step time (ms) over a row's ok repeats' metrics."""
    if len(metrics) >= REPEATS_FOR_T:
        return t_interval([m["step_time_ms"]["median"] for m in metrics])
    steps = [m.get("steady_step_ms") for m in metrics]
    if metrics and all(len(s or ()) >= 2 for s in steps):
        return bootstrap_step_interval(steps)
    return None


def throughput_interval(metrics: list[dict]) -> Interval | None:
    """The interval of the throughput over a row's ok repeats: t over the repeats' own
    throughputs, or the step-time bootstrap turned into items per second."""
    if len(metrics) >= REPEATS_FOR_T:
        return t_interval([m["throughput"] for m in metrics])
    step = step_interval(metrics)
    if step is None:
        return None
    # items per step is the same in every repeat of a row: throughput x median step time
    items_ms = metrics[0]["throughput"] * metrics[0]["step_time_ms"]["median"]
    return Interval(items_ms / step.high, items_ms / step.low, step.method)


@dataclass(frozen=True)
class Ratio:
    value: float
    interval: Interval | None

    def text(self) -> str:
        spread = f" ({self.interval.text()})" if self.interval else ""
        return f"{_short(self.value)}{spread}"


def ratio(top: float, top_ci: Interval | None, bottom: float, bottom_ci: Interval | None
          ) -> Ratio:
    """top / bottom, with an interval where both have one: the two log-scale half-widths
    added in quadrature (the two estimates are independent)."""
    value = top / bottom
    if top_ci is None or bottom_ci is None:
        return Ratio(value, None)
    half = math.hypot(top_ci.log_half_width, bottom_ci.log_half_width)
    method = "t" if top_ci.method.startswith("t") and bottom_ci.method.startswith("t") \
        else "bootstrap"
    return Ratio(value, Interval(value * math.exp(-half), value * math.exp(half), method))
