"""The report's headline for one spec: at each device count (and node count, and modes), every
framework by its representative approach, declared in the registry before anything is measured
(never its fastest, which would reward the luckiest of runs within noise of each other),
ranked against the other frameworks with its ratio to the fastest and that ratio's 95%
interval. Frameworks that tie share a rank (competition_ranks), so no rank says one is faster
than a framework it ties. Beside each: its scaling efficiency with its interval and, where the
devices shared one CPU's cores, the fair reference. Then the cells not to trust, and each
framework's other approaches against its representative. It reads the rows report.py built
(their ``cells`` and intervals) and imports nothing of report.py."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from itertools import combinations
from typing import TYPE_CHECKING

from parbench.run.modes import MODES
from parbench.run.registry import BACKENDS, FRAMEWORKS

from .intervals import Interval, Ratio
from .paired import tie, versus
from .ranks import Rank, competition_ranks
from .rows import throughput_column

if TYPE_CHECKING:
    from .rows import Cell, Row

HEADING = "Headline"
OTHERS = "Other approaches against their framework's representative"
ON_DEVICES = "device MiB per device"
NOTE = (
    "Per device count: each framework by its representative approach, declared before "
    "measuring (what its users would run on one machine: at 1 device its single backend, on "
    "several {representatives}), not by which approach ran fastest; the others are under "
    "{others}. In brackets: the 95% confidence interval (How the figures are made). "
    "vs fastest: {speed} / the fastest row's; where one sweep ran both rows, taken round by "
    "round (the geometric mean of each round's ratio, Student's t over the rounds: drift that "
    "moves a whole round cancels), else from each row's own interval, the two half-widths "
    "added in quadrature; ratio method names which. Two frameworks tie when the 95% interval "
    "of their ratio holds 1, "
    "and ties join through each other (A = B and B = C: all three share a rank); "
    "a rank is 1 + the frameworks ranked above it (=1, =1, 3); a pair without an interval "
    "counts as a tie, its rank marked ?. shared "
    "cores: the CPU cores the devices of the run shared; there N devices can at best match one "
    "process given all their threads, so scaling eff. (against N x one device) reads low by "
    "design, and vs 1-dev, same threads compares with the framework's single backend given as "
    "many threads as the N devices had together.")
OTHERS_NOTE = (
    "Each framework's approaches besides its representative, at the same device count and "
    "modes: vs representative is the approach's {speed} / its representative's, with that "
    "ratio's 95% interval (ratio method: paired round by round, or unpaired, as in the "
    "headline); tie: whether that interval holds 1 (? where it has none).")


def note(speed: str) -> str:
    """The headline's note, for rows whose throughput column is ``speed``."""
    declared = ", ".join(f.representative for f in FRAMEWORKS.values() if f.representative)
    return NOTE.format(speed=speed, representatives=declared, others=OTHERS)


def _key(row: Row) -> tuple:
    """The headline line a row competes in: its node count, device count and modes (a bf16
    row never races fp32 ones, nor a 2-node row 1-node ones), the defaults first."""
    return (row.nodes, row.devices, bool(row.modes.changed()), row.modes.label)


def _label(row: Row) -> str:
    """A headline line's name: '2 device(s)', '2x1 device(s) bf16'."""
    return f"{row.devices_cell} device(s){' ' + row.modes.label if row.modes.changed() else ''}"


def _by_framework(rows: list[Row]) -> dict[str, list[Row]]:
    frameworks: dict[str, list[Row]] = defaultdict(list)
    for row in rows:  # in report order: frameworks stay in the order the tables show them
        frameworks[row.framework].append(row)
    return frameworks


def representative_backend(framework: str, devices: int) -> str | None:
    """The backend a framework is shown by at ``devices`` devices: its single backend at 1,
    its declared representative beyond (None: it declares none, or is unknown)."""
    info = FRAMEWORKS.get(framework)
    if info is None:
        return None
    return info.single if devices == 1 else info.representative


def _representative(of: list[Row]) -> Row | None:
    """Of one framework's rows in one headline line, its representative's: at the threads a
    run gets by default, and the backend's default launcher where it ran with several (the
    first its launchers list else)."""
    backend = representative_backend(of[0].framework, of[0].devices)
    launchers = BACKENDS[backend].launchers if backend in BACKENDS else ()
    found = [row for row in of if row.backend == backend]
    found.sort(key=lambda row: (not row.default_threads, launchers.index(row.launcher)
                                if row.launcher in launchers else len(launchers)))
    return found[0] if found else None


@dataclass(frozen=True)
class Entry:
    """One framework in a headline line: its representative's row, rank and ratio to the
    line's fastest row (exactly 1 for that row)."""

    row: Row
    rank: Rank
    versus: Ratio


@dataclass(frozen=True)
class Line:
    """One headline line (a node count, device count and modes): the ranked entries, the
    frameworks left out and why, and every other approach with its representative (None
    where that has no throughput there)."""

    label: str
    entries: list[Entry]
    missing: list[str]
    others: list[tuple[Row, Row | None]]


def _missing(framework: str, of: list[Row], representative: Row | None) -> str:
    backend = representative_backend(framework, of[0].devices)
    if backend is None:
        return f"{framework} (it declares no representative for several devices)"
    if representative is None:
        return f"{framework} (its representative {backend} did not run there)"
    return f"{framework} (its representative {representative.series} has no ok repeat)"


def _line(rows: list[Row]) -> Line:
    chosen, missing, others = [], [], []
    for framework, of in _by_framework(rows).items():
        found = _representative(of)
        present = found if found is not None and found.throughput is not None else None
        if present is None:
            missing.append(_missing(framework, of, found))
        else:
            chosen.append(present)
        others += [(row, present) for row in of
                   if row is not found and row.throughput is not None]
    ranked = sorted(zip(chosen, competition_ranks(chosen, tie)),
                    key=lambda entry: (entry[1].place, -entry[0].throughput))
    entries = [Entry(row, rank, versus(row, ranked[0][0])) for row, rank in ranked]
    return Line(_label(rows[0]), entries, missing, others)


def headline_lines(rows: list[Row]) -> list[Line]:
    """Every headline line of the rows, in order: single node, fewest devices, defaults first."""
    per_key: dict[tuple, list[Row]] = defaultdict(list)
    for row in rows:
        per_key[_key(row)].append(row)
    return [_line(per_key[key]) for key in sorted(per_key)]


def headline_columns(rows: list[Row]) -> tuple[str, ...]:
    """The headline's columns (throughput in the rows' task's unit); device memory only where
    some row ran on devices, the fair reference only where devices shared cores."""
    speed = throughput_column(rows[0].task)
    shared = any(row.cells["shared cores"] for row in rows)
    columns = ("devices", *_mode_columns(), "rank", "framework", "approach", speed,
               "vs fastest", "ratio method", "scaling eff.",
               *(("shared cores", "vs 1-dev, same threads") if shared else ()),
               # the task's first quality figure (accuracy; a language model's val loss)
               next(iter(rows[0].task.quality_columns)), "util. %", "MFU %", "RSS MiB per rank")
    on_devices = any(isinstance(row.cells[ON_DEVICES], list) for row in rows)
    return (*columns, ON_DEVICES) if on_devices else columns


def _mode_columns() -> tuple[str, ...]:
    return tuple(mode.column for mode in MODES.values() if mode.headline)


def _with_interval(value: float | None, interval: Interval | None) -> str | None:
    return None if value is None else Ratio(value, interval).text()


def _interval(row: Row, name: str) -> Interval | None:
    low, high = row.cells[f"{name} 95% low"], row.cells[f"{name} 95% high"]
    return None if low is None else Interval(low, high, "")


def _cells(entry: Entry) -> dict[str, Cell]:
    row, cells = entry.row, entry.row.cells
    return {"rank": entry.rank.text(), "framework": row.framework, "approach": row.series,
            throughput_column(row.task): _with_interval(row.throughput, row.speed_ci),
            "vs fastest": entry.versus.text(), "ratio method": _method(entry.versus),
            "scaling eff.": _with_interval(cells["scaling eff."], _interval(row, "scaling eff.")),
            "vs 1-dev, same threads": _with_interval(
                cells["vs single same threads"], _interval(row, "vs single same threads")),
            "shared cores": cells["shared cores"]}


def _method(found: Ratio) -> str | None:
    """How a ratio's interval was made: 'paired t, 5 rounds', 't' or 'bootstrap' (unpaired)."""
    return found.interval.method if found.interval else None


def headline_rows(rows: list[Row]) -> list[tuple[Row, dict[str, Cell]]]:
    """(row, the headline's own cells) of each framework's representative per headline line,
    ranked within the line, the lines in order."""
    return [(entry.row, entry.row.cells | _cells(entry))
            for line in headline_lines(rows) for entry in line.entries]


def tie_lines(rows: list[Row]) -> list[str]:
    """Per headline line, the pairs of frameworks (their representatives) that tie, and the
    frameworks left out of it because their representative has no figure there."""
    notes = []
    for line in headline_lines(rows):
        pairs = [f"{a.row.framework} = {b.row.framework}"
                 for a, b in combinations(line.entries, 2) if tie(a.row, b.row)]
        if pairs:
            notes.append(f"Ties at {line.label}: {', '.join(pairs)}.")
        if line.missing:
            notes.append(f"Not in the headline at {line.label}: {', '.join(line.missing)}.")
    return notes


def others_columns(rows: list[Row]) -> tuple[str, ...]:
    speed = throughput_column(rows[0].task)
    return ("devices", *_mode_columns(), "framework", "approach", speed, "representative",
            "vs representative", "ratio method", "tie")


def others_rows(rows: list[Row]) -> list[dict[str, Cell]]:
    """Per headline line, each framework's other approaches: its throughput, and its ratio to
    the framework's representative there (none where that has no throughput)."""
    table = []
    for line in headline_lines(rows):
        for row, reference in line.others:
            verdict = tie(row, reference) if reference else None
            table.append(row.cells | {
                "framework": row.framework, "approach": row.series,
                throughput_column(row.task): _with_interval(row.throughput, row.speed_ci),
                "representative": reference.series if reference else None,
                "vs representative": versus(row, reference).text() if reference else None,
                "ratio method": _method(versus(row, reference)) if reference else None,
                "tie": None if reference is None else "?" if verdict is None
                else "yes" if verdict else "no"})
    return table


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
    for column, of in (("MFU %", "datasheet peak per device"),
                       ("util. %", "measured matmul peak of every core it used")):
        if row.cells[column] is not None:
            return of, row.cells[column]
    return None


def limit_lines(rows: list[Row]) -> list[str]:
    """Per framework, how close its backend nearest the limit comes, and how far the farthest
    stays (its share of the peak, at one device count each)."""
    lines = []
    for framework, of in _by_framework(rows).items():
        shares = sorted(((row, *limit) for row in of if (limit := _limit(row))),
                        key=lambda entry: -entry[2])
        if not shares:
            continue
        (near, peak, best), (far, _, worst) = shares[0], shares[-1]
        lines.append(f"{framework}: closest to the limit {near.label}, {best:.3g} % of the "
                     f"{peak}; farthest {far.label}, {worst:.3g} %.")
    return lines
