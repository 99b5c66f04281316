"""The report's headline for one spec: at each device count (and node count, and modes), every
framework's fastest approach, ranked against the other frameworks with its ratio to the fastest
and that ratio's 95% interval; a pair whose intervals overlap is a tie, so nothing within noise
is called faster. Beside each: its scaling efficiency with its interval and, where the devices
shared one CPU's cores, the fair reference. Then the cells not to trust. It reads the rows
report.py built (their ``cells`` and intervals) and imports nothing of report.py."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from parbench.run.modes import MODES

from .intervals import Interval, Ratio, ratio
from .rows import throughput_column

if TYPE_CHECKING:
    from .rows import Cell, Row

ON_DEVICES = "device MiB per device"
NOTE = (
    "Per device count: each framework's fastest approach (highest median "
    "{speed}), ranked. A figure in brackets is its 95% confidence interval (How the figures "
    "are made says how each is made). Two rows whose {speed} intervals overlap are a tie, "
    "never one faster than the other: rank =1 ties the fastest, a rank with ? could not be "
    "decided (no interval); an approach's 'ties' are its framework's other approaches within "
    "noise of it. vs fastest: {speed} / the fastest row's. shared cores: the CPU cores the "
    "devices of the run shared; there N devices can at best match one process given all their "
    "threads, so scaling eff. (against N x one device) reads low by design, and vs 1-dev, same "
    "threads compares with the framework's single backend given as many threads as the N "
    "devices had together.")


def _key(row: Row) -> tuple:
    """The headline line a row competes in: its node count, device count and modes (a bf16
    row never races fp32 ones, nor a 2-node row 1-node ones), the defaults first."""
    return (row.nodes, row.devices, bool(row.modes.changed()), row.modes.label)


def _by_framework(rows: list[Row]) -> dict[str, list[Row]]:
    frameworks: dict[str, list[Row]] = defaultdict(list)
    for row in rows:  # in report order: frameworks stay in the order the tables show them
        frameworks[row.framework].append(row)
    return frameworks


def tie(a: Row, b: Row) -> bool | None:
    """Whether two rows' speed intervals overlap (None: one has no interval)."""
    if a.speed_ci is None or b.speed_ci is None:
        return None
    return a.speed_ci.overlaps(b.speed_ci)


def _fastest(rows: list[Row]) -> dict[tuple, tuple[Row, list[Row]]]:
    """Per headline key: the framework's row with the highest median throughput (on equal
    medians the earlier, the baseline) and its other rows within noise of it."""
    best: dict[tuple, Row] = {}
    for row in rows:
        if row.throughput is not None and (_key(row) not in best
                                           or row.throughput > best[_key(row)].throughput):
            best[_key(row)] = row
    return {key: (top, [r for r in rows if r is not top and _key(r) == key
                        and r.throughput is not None and tie(r, top)])
            for key, top in best.items()}


def headline_columns(rows: list[Row]) -> tuple[str, ...]:
    """The headline's columns (throughput in the rows' task's unit); device memory only where
    some row ran on devices, the fair reference only where devices shared cores."""
    speed = throughput_column(rows[0].task)
    shared = any(row.cells["shared cores"] for row in rows)
    columns = ("devices", *(mode.column for mode in MODES.values() if mode.headline), "rank",
               "framework", "approach", speed, "vs fastest", "scaling eff.",
               *(("shared cores", "vs 1-dev, same threads") if shared else ()),
               # the task's first quality figure (accuracy; a language model's val loss)
               next(iter(rows[0].task.quality_columns)), "util. %", "MFU %", "RSS MiB per rank")
    on_devices = any(isinstance(row.cells[ON_DEVICES], list) for row in rows)
    return (*columns, ON_DEVICES) if on_devices else columns


def _with_interval(value: float | None, interval: Interval | None) -> str | None:
    return None if value is None else Ratio(value, interval).text()


def _rank(position: int, row: Row, top: Row) -> str:
    if row is top:
        return "1"
    tied = tie(row, top)
    return f"{position}?" if tied is None else "=1" if tied else str(position)


def _cells(row: Row, tied: list[Row], top: Row, position: int) -> dict[str, Cell]:
    versus = Ratio(1.0, None) if row is top else ratio(row.throughput, row.speed_ci,
                                                        top.throughput, top.speed_ci)
    cells = row.cells
    return {"rank": _rank(position, row, top), "framework": row.framework,
            "approach": row.series + (f" (ties {', '.join(r.series for r in tied)})"
                                      if tied else ""),
            throughput_column(row.task): _with_interval(row.throughput, row.speed_ci),
            "vs fastest": versus.text(),
            "scaling eff.": _with_interval(cells["scaling eff."], _interval(row, "scaling eff.")),
            "vs 1-dev, same threads": _with_interval(
                cells["vs single same threads"], _interval(row, "vs single same threads")),
            "shared cores": cells["shared cores"]}


def _interval(row: Row, name: str) -> Interval | None:
    low, high = row.cells[f"{name} 95% low"], row.cells[f"{name} 95% high"]
    return None if low is None else Interval(low, high, "")


def headline_rows(rows: list[Row]) -> list[tuple[Row, dict[str, Cell]]]:
    """(row, the headline's own cells) of each framework's fastest row per headline key,
    ranked within the key, the keys in order (single node, fewest devices, defaults first)."""
    per_key: dict[tuple, list[tuple[Row, list[Row]]]] = defaultdict(list)
    for of in _by_framework(rows).values():
        for key, best in _fastest(of).items():
            per_key[key].append(best)
    lines = []
    for key in sorted(per_key):
        ranked = sorted(per_key[key], key=lambda best: -best[0].throughput)
        top = ranked[0][0]
        lines += [(row, row.cells | _cells(row, tied, top, position))
                  for position, (row, tied) in enumerate(ranked, start=1)]
    return lines


def tie_lines(rows: list[Row]) -> list[str]:
    """Per headline key, the pairs of frameworks (their fastest approaches) that tie."""
    lines = []
    chosen = [row for row, _ in headline_rows(rows)]
    for key in sorted({_key(row) for row in chosen}):
        line = [r for r in chosen if _key(r) == key]
        pairs = [f"{a.framework} = {b.framework}" for i, a in enumerate(line)
                 for b in line[i + 1:] if tie(a, b)]
        if pairs:
            lines.append(f"Ties at {line[0].devices_cell} device(s)"
                         f"{' ' + line[0].modes.label if line[0].modes.changed() else ''}: "
                         f"{', '.join(pairs)}.")
    return lines


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
