"""What ``parbench explain`` prints: one row per variant (baseline, as given, each cause
switched off) and one verdict line per cause, each judged against the baseline's seed spread
(parbench.results.accuracy_change.verdict)."""

from __future__ import annotations

from typing import Protocol

from tabulate import tabulate

from parbench.results.accuracy_change import SPREAD, SeedSummary, summarise, verdict
from parbench.results.causes import Cause


class Ran(Protocol):
    """A variant of the ablation (parbench.cli.explain.Variant)."""

    name: str
    cause: Cause | None
    why_not: str | None
    records: list[dict]

    @property
    def label(self) -> str: ...


def _change(summary: SeedSummary, baseline: SeedSummary) -> float | None:
    if summary.median is None or baseline.median is None:
        return None
    return summary.median - baseline.median


def _carried(given: float | None, off: float | None) -> float | None:
    """What a cause carries: the change as given less the change with the cause off."""
    return None if given is None or off is None else given - off


def _row(variant: Ran, key: str, baseline: SeedSummary | None, given: float | None) -> list:
    """A variant's cells; ``baseline`` None: this is the baseline's row (no change of its own)."""
    switch = variant.cause.option if variant.cause else None
    if variant.why_not:
        return [variant.name, variant.label, switch, "not run"]
    summary = summarise(variant.records, key)
    change = _change(summary, baseline) if baseline else None
    ok = sum(r["status"] == "ok" for r in variant.records)
    return [variant.name, variant.label, switch, f"{ok}/{len(variant.records)}",
            summary.median, change, summary.spread,
            _carried(given, change) if variant.cause else None]


def explain_table(variants: list[Ran], metric: str, key: str) -> str:
    """The variants' table: ``variants[0]`` is the baseline, ``variants[1]`` the
    configuration as given."""
    baseline = summarise(variants[0].records, key)
    given = _change(summarise(variants[1].records, key), baseline)
    rows = [_row(variants[0], key, None, None),
            *(_row(v, key, baseline, given) for v in variants[1:])]
    return tabulate(rows, headers=("variant", "runs", "switch", "ok runs", f"{metric} median",
                                   "change vs baseline", f"seed spread ({SPREAD})",
                                   "carried by this cause"),
                    tablefmt="github", floatfmt=".4g")


def explain_lines(variants: list[Ran], checked: list[Cause], metric: str, key: str) -> list[str]:
    """The verdicts: of the change as given, of each cause's share (or why it was not
    measured), and the causes the record rules out, with why."""
    baseline = summarise(variants[0].records, key)
    given_summary = summarise(variants[1].records, key)
    given = _change(given_summary, baseline)
    spread = "n/a" if baseline.spread is None else f"{baseline.spread:.4g}"
    lines = [f"as given: {metric} change {_signed(given)} against the baseline "
             f"(baseline spread {spread} over {baseline.seeds} seed(s)): "
             f"{verdict(given, baseline, given_summary.seeds)}"]
    for variant in variants[2:]:
        cause = variant.cause
        if variant.why_not:
            lines.append(f"{cause.name} ({cause.reason}): {variant.why_not}")
            continue
        off = summarise(variant.records, key)
        carried = _carried(given, _change(off, baseline))
        seeds = min(off.seeds, given_summary.seeds)
        lines.append(f"{cause.name} ({cause.reason}): carries {_signed(carried)} of the "
                     f"{_signed(given)} change: {verdict(carried, baseline, seeds)}")
    lines += [f"absent: {c.name}: {c.reason}" for c in checked if not c.applies]
    return lines


def _signed(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.4g}"
