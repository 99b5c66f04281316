"""Comparisons between two rows, paired by round where one sweep ran them both.

``parbench compare`` runs every configuration once per round (the order within a round
shuffled from a recorded seed), so whatever moves the machine's speed between rounds (another
tenant, the CPU's clock, caches) moves every configuration of a round together. A ratio taken
round by round cancels that drift; an interval of each row's own repeats counts it as noise in
both rows. So the report compares two rows of one sweep by their per-round ratios: the ratio
is the geometric mean of the rounds' ratios and its interval Student's t over them, the rounds
being the repeats both rows completed ok in that sweep. Rows not run in one sweep, or with
fewer than 3 shared rounds, fall back to the unpaired ratio of their own intervals
(``intervals.ratio``), and the figure's method says which was used.

A sweep that stopped as soon as its answers were clear (``compare --until-ci``) looked at its
data after every round; its intervals are made at the level its sequential rule spent on each
look (``sweep.max_rounds``, see parbench.results.sequential), so what compare stopped on and
what the report prints agree."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from .intervals import LEVEL, REPEATS_FOR_T, Interval, Ratio, ratio

if TYPE_CHECKING:
    from .rows import Row


def _rounds(row: Row) -> dict[tuple[str, int], float]:
    """(sweep id, round) -> the throughput of each ok repeat a sweep ran."""
    return {(r["sweep"]["id"], r["repeat"]): r["metrics"]["throughput"]
            for r in row.runs if r["status"] == "ok" and r.get("sweep")}


def planned_rounds(a: Row, b: Row) -> int | None:
    """The most rounds the sweep of both rows planned, when it stopped on its answers (the
    sequential rule's looks); None for a sweep of a fixed number of rounds."""
    planned = {r["sweep"].get("max_rounds") for row in (a, b) for r in row.runs
               if r.get("sweep")}
    return max((p for p in planned if p), default=None)


def paired_log_ratios(a: Row, b: Row) -> list[float]:
    """log(a / b) of each round both rows completed ok in one sweep."""
    of_a, of_b = _rounds(a), _rounds(b)
    return [math.log(of_a[key] / of_b[key]) for key in sorted(of_a.keys() & of_b.keys())]


def _t_interval(logs: list[float]) -> Interval:
    """Student's t 95% interval of the geometric mean of the rounds' ratios."""
    from scipy import stats  # 0.6 s to import: only a report of paired rows pays it

    values = np.asarray(logs, dtype=float)
    half = (stats.t.ppf(0.5 + LEVEL / 2, len(values) - 1) * values.std(ddof=1)
            / math.sqrt(len(values)))
    centre = float(values.mean())
    return Interval(math.exp(centre - half), math.exp(centre + half),
                    f"paired t, {len(values)} rounds")


def paired_ratio(a: Row, b: Row, factor: float = 1.0) -> Ratio | None:
    """a's throughput / (factor x b's), round by round, with its interval; None where the two
    rows share fewer than 3 rounds of one sweep."""
    logs = paired_log_ratios(a, b)
    if len(logs) < REPEATS_FOR_T:
        return None
    planned = planned_rounds(a, b)
    if planned is None:
        interval = _t_interval(logs)
    else:  # the sequential rule's own interval, at its level per look
        from .sequential import swept_interval

        found = swept_interval(logs, planned)
        interval = Interval(found.low, found.high, f"paired sequential t, {len(logs)} rounds "
                            f"of at most {planned}")
    centre = math.sqrt(interval.low * interval.high) / factor
    return Ratio(centre, interval.scaled(1 / factor))


def versus(a: Row, b: Row, factor: float = 1.0) -> Ratio:
    """a's throughput / (factor x b's): paired by round where one sweep ran both (see the
    module's docstring), else from each row's own interval."""
    if a is b and factor == 1.0:
        return Ratio(1.0, None)
    paired = paired_ratio(a, b, factor)
    if paired is not None:
        return paired
    bottom_ci = b.speed_ci.scaled(factor) if b.speed_ci else None
    return ratio(a.throughput, a.speed_ci, factor * b.throughput, bottom_ci)


def tie(a: Row, b: Row) -> bool | None:
    """Whether two rows' speeds cannot be told apart: the 95% interval of their ratio
    (``versus``: paired where it can be) holds 1; None where the ratio has no interval."""
    found = versus(a, b)
    if found.interval is None:
        return None
    return found.interval.low <= 1 <= found.interval.high
