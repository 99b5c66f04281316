"""The report's headline for one spec: per framework, the fastest approach at each device count
(and node count, beyond one node) with its scaling efficiency, noise and memory per rank, then
the cells not to trust. It reads the rows report.py built (their ``cells``) and imports nothing
of report.py, so either can change alone."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from parbench.run.modes import MODES

from .rows import throughput_column

if TYPE_CHECKING:
    from .rows import Cell, Row

ON_DEVICES = "device MiB per device"


def _by_framework(rows: list[Row]) -> dict[str, list[Row]]:
    frameworks: dict[str, list[Row]] = defaultdict(list)
    for row in rows:  # in report order: frameworks stay in the order the tables show them
        frameworks[row.framework].append(row)
    return frameworks


def _fastest(rows: list[Row]) -> list[Row]:
    """The row with the highest median samples/s at each node count, device count and modes
    (a bf16 row never wins over fp32 ones, nor a 2-node row over 1-node ones: each has its own
    line), single-node first, fewest devices first, the default modes first; on a tie the
    earlier row (the baseline) wins."""
    best: dict[tuple, Row] = {}
    for row in rows:
        speed, key = row.throughput, (row.nodes, row.devices, bool(row.modes.changed()),
                                      row.modes.label)
        if speed is not None and (key not in best or speed > best[key].throughput):
            best[key] = row
    return [best[key] for key in sorted(best)]


def headline_columns(rows: list[Row]) -> tuple[str, ...]:
    """The headline's columns (throughput in the rows' task's unit); device memory only where
    some row ran on devices."""
    columns = ("framework", "devices",
               *(mode.column for mode in MODES.values() if mode.headline), "fastest",
               throughput_column(rows[0].task), "scaling eff.", "cv %", "noisy",
               "TFLOP/s per device", "util. %", "MFU %", "RSS MiB per rank")
    on_devices = any(isinstance(row.cells[ON_DEVICES], list) for row in rows)
    return (*columns, ON_DEVICES) if on_devices else columns


def headline_rows(rows: list[Row]) -> list[tuple[Row, dict[str, Cell]]]:
    """(row, the headline's own cells) of each framework's fastest row per device count."""
    return [(row, {"framework": framework, "fastest": row.series})
            for framework, of in _by_framework(rows).items() for row in _fastest(of)]


def _why_noisy(row: Row) -> str:
    reasons = str(row.cells["noisy"]).split("+")
    return ", ".join(f"cv {row.cells['cv %']:.1f} %" if reason == "cv"
                     else "busy machine at start" for reason in reasons)


def _not_ok(row: Row) -> str:
    bad = sum(r["status"] != "ok" for r in row.runs)
    return f"{row.label} ({bad} of {len(row.runs)} repeat(s) {row.cells['status']})"


def warnings(rows: list[Row]) -> list[str]:
    """One line per framework that has noisy or not-ok cells, naming them and why."""
    lines = []
    for framework, of in _by_framework(rows).items():
        noisy = [f"{row.label} ({_why_noisy(row)})" for row in of if row.cells["noisy"] != "no"]
        not_ok = [_not_ok(row) for row in of if row.cells["status"] != "ok"]
        parts = [f"{what}: {', '.join(cells)}"
                 for what, cells in (("noisy", noisy), ("not ok", not_ok)) if cells]
        if parts:
            lines.append(f"{framework}: {'; '.join(parts)}")
    return lines


def _limit(row: Row) -> tuple[str, float] | None:
    """(what the share is of, the share %) of a row: MFU where a datasheet peak exists, else
    the measured matmul peak's; None without either."""
    for column, of in (("MFU %", "datasheet"), ("util. %", "measured matmul")):
        if row.cells[column] is not None:
            return of, row.cells[column]
    return None


def limit_lines(rows: list[Row]) -> list[str]:
    """Per framework, how close its backend nearest the limit comes, and how far the farthest
    stays (share of the peak per device, at one device count each)."""
    lines = []
    for framework, of in _by_framework(rows).items():
        shares = sorted(((row, *limit) for row in of if (limit := _limit(row))),
                        key=lambda entry: -entry[2])
        if not shares:
            continue
        (near, peak, best), (far, _, worst) = shares[0], shares[-1]
        lines.append(f"{framework}: closest to the limit {near.label}, {best:.3g} % of the "
                     f"{peak} peak per device; farthest {far.label}, {worst:.3g} %.")
    return lines
