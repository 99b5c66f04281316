"""When `parbench compare --until-ci H --budget MINUTES` may stop adding rounds, and the interval
the report prints for a comparison of such a sweep.

A comparison of configurations A and B is read from the rounds both completed ok: r_k =
throughput_A,k / throughput_B,k (paired, so drift that moves a whole round cancels). Its point
estimate is the geometric mean of r_k, its interval Student's t on log r_k. After every round
from the third on, each comparison is looked at: "decided" when its interval excludes 1,
"narrow" when its relative half-width exp(half) - 1 is at most H, else "open"; the sweep stops
when none is open, or after ``max_rounds`` (fixed from the budget before any comparison is seen).

Looking after every round and stopping on the first interval that excludes 1 calls two identical
configurations different far more often than 5 % (simulated: 25 % of sweeps over 25 rounds,
benchmarks/sequential_rule.py). The method is therefore a sequence of **repeated confidence
intervals** with a Pocock-type boundary: every look uses a t-interval at one constant nominal
level, chosen so that all the looks of a sweep cover the true ratio together with probability
1 - alpha (alpha = 0.05). References: Pocock (1977), Group sequential methods in the design and
analysis of clinical trials, Biometrika 64:191-199 (the constant nominal level); Jennison &
Turnbull (1984), Repeated confidence intervals for group sequential clinical trials, Controlled
Clinical Trials 5:33-45, and their book Group Sequential Methods with Applications to Clinical
Trials (2000), ch. 9 (simultaneous coverage holds at any stopping time, whatever made the sweep
stop); Jennison & Turnbull (1991), Exact calculations for sequential t, chi2 and F tests,
Biometrika 78:133-141 (the t version, for an unknown spread). Under the null the running
t-statistics do not depend on the true spread, so the nominal level is calibrated exactly, for
each ``max_rounds``, by a fixed-seed simulation of 20,000 normal sweeps; it takes the
conservative order statistic, so the family-wise rate is at most alpha with 99 % confidence over
the calibration's own sampling (new simulated sweeps: 4.5 to 5.0 % from 4 to 100 rounds).

**Stated error rate**: for each comparison, with per-round log-ratios independent and normal
(any mean, any spread), the probability that any look's interval misses the true ratio is at most
5 %. So an A/A comparison is called different in at most 5 % of sweeps, and the interval printed
where the sweep stopped (decided, narrow or out of budget) covers the true ratio in at least 95 %
of sweeps. Rounds in which one side failed only remove looks, which cannot raise the rate;
heavy-tailed noise (Student's t, 3 dof) lowers it (3.3 %). It assumes the rounds independent:
drift that moves one configuration and not the other, round after round, is not covered. The
rate is per comparison: the headline's comparisons are not corrected for each other.

Why not Bonferroni over the looks (each look at 1 - alpha / looks), the simpler bound: the looks
of one sweep are strongly correlated, so it spends little more than a third of alpha (A/A 1.9 %
at 25 rounds) and finds a true 10 % difference at this machine's noise in 46 % of sweeps,
against 64 % here (20,000 simulated sweeps each, benchmarks/sequential_rule.py).

**This machine's noise** (results/reference/runs: 81 records by `compare`, 3 round-robin rounds
of 64-step runs, AMD EPYC, 2 vCPUs; benchmarks/sequential_rule.py recomputes it): per-round
log-ratio of the throughputs of two configurations of the same spec and device count, over 173
pairs, standard deviation median 0.104 (range 0.001-0.48), pooled 0.158; the same pairs unpaired
(sqrt(s_A^2 + s_B^2) over the same rounds) median 0.131, pooled 0.182; each configuration's own
cv (standard deviation of log throughput over its repeats, 27 configurations) median 0.083,
range 0.034-0.38, pooled 0.123. Pairing narrows the per-round spread by 13 to 21 % here: the
drift a round shares is real but smaller than each run's own noise.
At that noise a 45-minute headline sweep (25 rounds of 105 s) ends with half-widths near 10 %;
5 % would take 94 rounds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from parbench.results.intervals import Interval

ALPHA = 0.05
FIRST_LOOK = 3  # rounds before the first look: a t-interval of 2 rounds has 1 degree of freedom
# the calibration's time grows with the rounds (0.1 s at 25, 0.3 s at 100), and 100 rounds of
# the headline already take about 3 hours on the reference machine
MAX_ROUNDS = 100
DEFAULT_BUDGET_MINUTES = 45.0  # issue 42: a headline sweep of at most 45 minutes
CALIBRATION_SWEEPS = 20_000
CALIBRATION_SEED = 0  # fixed: compare and the report must compute the same level
CALIBRATION_CONFIDENCE = 0.99
STATES = ("decided", "narrow", "open")


@dataclass(frozen=True)
class SequentialPlan:
    """A sweep of at most ``max_rounds`` rounds, looked at after every round from the third."""
    max_rounds: int
    alpha: float = ALPHA

    def __post_init__(self) -> None:
        _check_plan(self.max_rounds, self.alpha)

    @property
    def looks(self) -> int:
        return self.max_rounds - FIRST_LOOK + 1

    @property
    def level(self) -> float:
        return look_level(self.max_rounds, self.alpha)


def _check_plan(max_rounds: int, alpha: float) -> None:
    if isinstance(max_rounds, bool) or not isinstance(max_rounds, int) \
            or not FIRST_LOOK <= max_rounds <= MAX_ROUNDS:
        raise ValueError(f"a sequential plan needs {FIRST_LOOK} to {MAX_ROUNDS} rounds, "
                         f"got {max_rounds!r}")
    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha must be in (0, 0.5), got {alpha!r}")


def running_t(log_ratios: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Vectorised over sweeps (one row each): the mean and standard error of the first n
    log-ratios for n = FIRST_LOOK .. columns, and those n."""
    n = np.arange(1, log_ratios.shape[1] + 1)
    mean = np.cumsum(log_ratios, axis=1) / n
    # the sum of squares about the running mean; clipped at 0 against rounding
    squares = np.cumsum(log_ratios ** 2, axis=1) - n * mean ** 2
    se = np.sqrt(np.clip(squares, 0, None) / np.maximum(n - 1, 1) / n)
    first = FIRST_LOOK - 1
    return mean[:, first:], se[:, first:], n[first:]


@lru_cache(maxsize=None)
def look_level(max_rounds: int, alpha: float = ALPHA) -> float:
    """The confidence level of every look of a sweep planned for ``max_rounds`` rounds: what
    compare stops on and what the report prints for that sweep (the record's planned rounds)."""
    _check_plan(max_rounds, alpha)
    if max_rounds == FIRST_LOOK:
        return 1 - alpha  # one look: the plain t-interval, exact
    rng = np.random.default_rng(CALIBRATION_SEED)
    mean, se, n = running_t(rng.standard_normal((CALIBRATION_SWEEPS, max_rounds)))
    return 1 - _nominal_alpha(np.abs(mean) / se, n, alpha)


def _nominal_alpha(t: np.ndarray, n: np.ndarray, alpha: float) -> float:
    """The largest per-look two-sided alpha at which no more of the null sweeps ``t`` (|t| of
    each sweep at each look, n rounds) cross at some look than the conservative order statistic
    allows; a sweep crosses at that alpha exactly when its smallest p-value is at most it."""
    from scipy.special import bdtr, stdtrit

    sweeps = t.shape[0]
    counts = np.arange(sweeps)
    # P(Bin(sweeps, alpha) <= k - 1) <= 1 - confidence: the k-th smallest p-value is below the
    # true alpha-quantile with that confidence
    allowed = int(counts[bdtr(counts, sweeps, alpha) <= 1 - CALIBRATION_CONFIDENCE].max())
    # Bonferroni's alpha / looks holds whatever this sample says, so it is the floor
    low, high = alpha / len(n), alpha
    for _ in range(24):  # bisection on the log scale: at most 98 looks, so to 3e-7 relatively
        middle = math.sqrt(low * high)
        crossing = (t > stdtrit(n - 1, 1 - middle / 2)).any(axis=1).sum()
        low, high = (middle, high) if crossing <= allowed else (low, middle)
    return low


def _checked_logs(log_ratios: Sequence[float], plan: SequentialPlan) -> np.ndarray:
    logs = np.asarray(log_ratios, dtype=float)
    if logs.ndim != 1 or not np.isfinite(logs).all():
        raise ValueError("log-ratios must be a flat sequence of finite numbers")
    if len(logs) > plan.max_rounds:
        # more rounds than planned would be looks the error rate did not pay for
        raise ValueError(f"{len(logs)} rounds, but the sweep planned at most "
                         f"{plan.max_rounds}")
    return logs


def look(log_ratios: Sequence[float], plan: SequentialPlan) -> Interval:
    """The interval of the ratio (A / B) after the rounds so far: t on the per-round log-ratios,
    at the plan's per-look level."""
    from scipy.special import stdtrit

    logs = _checked_logs(log_ratios, plan)
    if len(logs) < FIRST_LOOK:
        raise ValueError(f"{len(logs)} paired rounds: the first look needs {FIRST_LOOK}")
    rounds = len(logs)
    half = stdtrit(rounds - 1, 0.5 + plan.level / 2) * logs.std(ddof=1) / math.sqrt(rounds)
    centre = logs.mean()
    return Interval(math.exp(centre - half), math.exp(centre + half),
                    f"sequential paired t, {rounds} of {plan.max_rounds} rounds, "
                    f"{100 * plan.level:.2f}% per look")


def swept_interval(log_ratios: Sequence[float], max_rounds: int) -> Interval:
    """For the report: a comparison of a sweep that planned ``max_rounds`` rounds."""
    return look(log_ratios, SequentialPlan(max_rounds))


@dataclass(frozen=True)
class Verdict:
    state: str  # one of STATES
    interval: Interval | None  # None before the first look
    rounds: int  # paired rounds the look used
    half_width: float  # the H it was held to

    @property
    def ratio(self) -> float | None:
        # the interval is symmetric on the log scale about the geometric mean
        return None if self.interval is None else math.sqrt(self.interval.low *
                                                            self.interval.high)

    @property
    def relative_half_width(self) -> float | None:
        return None if self.interval is None else math.expm1(self.interval.log_half_width)

    def why(self) -> str:
        """One line: the state and what made it, for compare's list of undecided comparisons."""
        if self.interval is None:
            return f"open: {self.rounds} paired rounds, the first look needs {FIRST_LOOK}"
        width = f"half-width {100 * self.relative_half_width:.1f}%"
        limit = f"{100 * self.half_width:g}%"
        text = {"decided": f"excludes 1 ({width})",
                "narrow": f"{width} <= {limit}",
                "open": f"holds 1 and its {width} > {limit}"}[self.state]
        return (f"{self.state}: {self.ratio:.3g} ({self.interval.text()}) {text}, "
                f"after {self.rounds} rounds")


def verdict(log_ratios: Sequence[float], plan: SequentialPlan, half_width: float) -> Verdict:
    """Where a comparison stands after the rounds so far (``half_width`` is H, as a fraction)."""
    half_width = check_half_width(half_width)
    logs = _checked_logs(log_ratios, plan)
    if len(logs) < FIRST_LOOK:
        return Verdict("open", None, len(logs), half_width)
    interval = look(logs, plan)
    if interval.low > 1 or interval.high < 1:
        state = "decided"
    elif math.expm1(interval.log_half_width) <= half_width:
        state = "narrow"
    else:
        state = "open"
    return Verdict(state, interval, len(logs), half_width)


def sweep_done(verdicts: Iterable[Verdict]) -> bool:
    """Whether no comparison is open (the budget's own end is compare's to check)."""
    return all(v.state != "open" for v in verdicts)


def rounds_that_fit(budget_s: float, round_s: float, spent_s: float, rounds_done: int = 1
                    ) -> int:
    """``max_rounds``: the rounds done plus those of ``round_s`` that fit in what is left of the
    budget after ``spent_s`` (which counts the rounds done), at most MAX_ROUNDS. Fixed before
    any comparison is looked at, so the data cannot move it."""
    for name, value in (("budget", budget_s), ("round time", round_s)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a finite number of seconds above 0, got {value!r}")
    if not (math.isfinite(spent_s) and spent_s >= 0) or rounds_done < 1:
        raise ValueError(f"time spent must be >= 0 s and rounds done >= 1, got {spent_s!r} "
                         f"and {rounds_done!r}")
    left = budget_s - spent_s
    rounds = rounds_done + (math.floor(left / round_s) if left > 0 else 0)
    if rounds < FIRST_LOOK:
        raise ValueError(f"a budget of {budget_s / 60:.1f} min is too small for three rounds: "
                         f"{rounds_done} round(s) used {spent_s / 60:.1f} min and each takes "
                         f"{round_s / 60:.1f} min, so {rounds} fit")
    return min(rounds, MAX_ROUNDS)


def check_half_width(value: float | str) -> float:
    """H for --until-ci: a finite number in (0, 1), the relative half-width (0.05 is 5 %)."""
    number = _number(value)
    if not (math.isfinite(number) and 0 < number < 1):
        raise ValueError(f"the half-width must be a number in (0, 1) (0.05 is 5%), got {value!r}")
    return number


def budget_seconds(minutes: float | str) -> float:
    """--budget MINUTES, checked (finite, above 0) and turned into seconds."""
    number = _number(minutes)
    if not (math.isfinite(number) and number > 0):
        raise ValueError(f"the budget must be a finite number of minutes above 0, got "
                         f"{minutes!r}")
    return number * 60


def _number(value: float | str) -> float:
    if isinstance(value, bool):
        return math.nan  # float(True) is 1.0, which no one meant
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan  # the caller's message names what was expected
