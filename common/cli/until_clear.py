"""``compare --until-ci H --budget MINUTES``: rounds until every headline comparison is clear.

After the first round the budget fixes the most rounds the sweep may run (before any
comparison is looked at: the data cannot move it), and that number goes into every later
record's ``sweep.max_rounds`` and the sweep's state file, so a resumed sweep keeps it. From the
third round on, after every round, each pair of frameworks in each headline line (their declared
representatives) is looked at through the sequential rule (parbench.results.sequential):
decided (its interval excludes 1), narrow (half-width at most H) or open. The sweep stops when
none is open, or at its last planned round, and says which were left open and why."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path

from parbench.base.errors import UsageError
from parbench.results.headline import headline_lines
from parbench.results.paired import paired_log_ratios
from parbench.results.records import check_folder
from parbench.results.report import build_groups
from parbench.results.sequential import (
    DEFAULT_BUDGET_MINUTES,
    SequentialPlan,
    Verdict,
    budget_seconds,
    check_half_width,
    rounds_that_fit,
    sweep_done,
    verdict,
)


def checked_until(half_width: float | None, budget_minutes: float | None) -> tuple[float, float]:
    """(H, budget seconds) from the flags, each checked; one line and exit 2 when wrong."""
    if half_width is None:
        raise UsageError("--budget goes with --until-ci H (a sweep of fixed rounds runs "
                         "--repeats rounds)")
    minutes = DEFAULT_BUDGET_MINUTES if budget_minutes is None else budget_minutes
    try:
        return check_half_width(half_width), budget_seconds(minutes)
    except ValueError as err:
        raise UsageError(str(err)) from None


def sweep_records(out: Path, sweep_id: str) -> list[dict]:
    return [r for r in check_folder(out).records if (r.get("sweep") or {}).get("id") == sweep_id]


def comparisons(out: Path, sweep_id: str, plan: SequentialPlan,
                half_width: float) -> dict[str, Verdict]:
    """Each headline pair of the sweep's records in ``out``: 'LINE: A vs B' -> its verdict."""
    found = {}
    for group in build_groups(sweep_records(out, sweep_id)):
        for line in headline_lines(group.rows):
            for a, b in combinations([entry.row for entry in line.entries], 2):
                name = f"{line.label}: {a.framework} vs {b.framework}"
                found[name] = verdict(paired_log_ratios(a, b), plan, half_width)
    return found


@dataclass
class UntilClear:
    """The stopping rule of one sweep, asked after each round (``after_round``)."""

    half_width: float
    budget_s: float
    out: Path
    sweep_id: str
    max_rounds: int | None = None  # fixed after the first round (or kept from a resumed sweep)
    verdicts: dict[str, Verdict] = field(default_factory=dict)

    def plan_rounds(self, round_s: float, spent_s: float) -> int:
        """The most rounds that fit the budget, from the first round's time. A resumed sweep
        kept some of its runs, which took no time in this process: their records' durations
        count instead (the budget is the whole sweep's)."""
        records = sweep_records(self.out, self.sweep_id)
        first = sum(r["duration_s"] for r in records if r["repeat"] == 0)
        spent = sum(r["duration_s"] for r in records)
        try:
            self.max_rounds = rounds_that_fit(self.budget_s, max(round_s, first),
                                              max(spent_s, spent))
        except ValueError as err:
            raise UsageError(f"--budget: {err}; its records are kept (--resume with a larger "
                             "--budget goes on)") from None
        return self.max_rounds

    def after_round(self, index: int, round_s: float = 0.0, spent_s: float = 0.0) -> bool:
        """Whether the sweep stops after round ``index`` (0-based), which took ``round_s`` of
        the ``spent_s`` spent so far: when no comparison is open, at the last planned round,
        or when another round like this one would overrun the budget (rounds can slow down
        after the first; stopping at fewer looks than planned cannot raise the error rate)."""
        if self.max_rounds is None:
            raise RuntimeError("after_round before plan_rounds")
        out_of_time = spent_s + round_s > self.budget_s
        if index + 1 < 3 and not out_of_time:
            return False
        self.verdicts = comparisons(self.out, self.sweep_id, SequentialPlan(self.max_rounds),
                                    self.half_width)
        clear = sum(v.state != "open" for v in self.verdicts.values())
        print(f"round {index + 1} of at most {self.max_rounds}: {clear} of "
              f"{len(self.verdicts)} headline comparisons clear"
              + ("; the budget has no room for another round" if out_of_time else ""),
              file=sys.stderr, flush=True)
        return (sweep_done(self.verdicts.values()) or index + 1 >= self.max_rounds
                or out_of_time)

    def summary(self) -> list[str]:
        """The comparisons left open, one line each with why (none: every one is clear)."""
        open_ones = {name: v for name, v in self.verdicts.items() if v.state == "open"}
        if not open_ones:
            return [f"every headline comparison is clear (decided, or within "
                    f"{100 * self.half_width:g}%)"]
        return [f"left open at the end of the budget: {name}: {v.why()}"
                for name, v in open_ones.items()]
