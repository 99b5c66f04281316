"""The comparison report: tables per spec and the environment of every run, as Markdown or
CSV. html_report builds the HTML page and writes report files; plots draws the figures."""

from __future__ import annotations

import csv
import io
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
from tabulate import tabulate

from .backends import BACKENDS

Cell = str | int | float | list[float] | None

KEY = ("backend", "devices", "launcher")
PERFORMANCE = (*KEY, "status", "runs", "samples/s", "samples/s min", "samples/s max",
               "scaling eff.", "step ms p50", "step ms p90", "startup s", "first step s")
QUALITY = (*KEY, "accuracy", "loss", "time to target s", "peak RSS MiB", "RSS MiB per rank",
           "peak device MiB", "device MiB per device")
ENVIRONMENT = ("spec", *KEY, "runs", "python", "OS", "CPU", "cores", "threads/worker",
               "framework", "version", "device names", "CUDA", "NCCL", "git commit")
NO_DEVICE = "n/a (CPU)"
NOT_REACHED = "not reached"
NOTES = (
    "Each cell is the median over the row's ok repeats; the spread of samples/s is the min and "
    "max over those repeats; runs counts ok/all repeats.",
    "Scaling efficiency = samples/s at N devices / (N x samples/s at 1 device), where the "
    "1-device reference is the framework's single backend, else the same backend at 1 device, "
    "in the same spec only.",
    "Time to target is training time (sum of step times) until the first evaluation at or above "
    "the target accuracy; a repeat that never reached it counts as infinitely slow.",
    "Peak memory: host RSS per process (rank) and allocator peak per device; the lists are "
    "medians over repeats position by position, so an imbalance (DataParallel's device 0) shows.",
)
# The framework's own 1-device backend: the reference of its scaling efficiency.
SINGLE = {b.framework: b.name for b in BACKENDS.values() if not b.parallel}


def _median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return float(np.median(present)) if present else None


def _per_position_median(lists: list[list[float]]) -> list[float]:
    """Median of each position (rank, device, step) over repeats; a shorter list simply has no
    say in the positions it lacks."""
    padded = np.full((len(lists), max(map(len, lists))), np.nan)
    for i, values in enumerate(lists):
        padded[i, :len(values)] = values
    return [float(v) for v in np.nanmedian(padded, axis=0)]


@dataclass
class Row:
    """The repeats of one backend x devices x launcher within one spec."""

    framework: str
    backend: str
    devices: int
    launcher: str
    runs: list[dict]
    cells: dict[str, Cell] = field(default_factory=dict)

    @property
    def metrics(self) -> list[dict]:
        return [r["metrics"] for r in self.runs if r["status"] == "ok"]

    @property
    def series(self) -> str:
        """The backend, with its launcher where the backend has a choice of launchers."""
        backend = BACKENDS.get(self.backend)
        launcher = f" [{self.launcher}]" if backend and len(backend.launchers) > 1 else ""
        return f"{self.backend}{launcher}"

    @property
    def label(self) -> str:
        return f"{self.series} x{self.devices}"

    def median(self, get: Callable[[dict], float | None]) -> float | None:
        return _median(get(m) for m in self.metrics)

    def per_position(self, get: Callable[[dict], list[float] | None]) -> list[float] | None:
        lists = [values for values in map(get, self.metrics) if values]
        return _per_position_median(lists) if lists else None


@dataclass
class Group:
    """Runs of one spec_sha256: only these are ever compared with each other."""

    sha: str
    title: str
    rows: list[Row]


def _status(runs: list[dict]) -> str:
    reasons = [f"{r['status']}: {(r['error'] or '?').splitlines()[0]}"
               for r in runs if r["status"] != "ok"]
    return "; ".join(dict.fromkeys(reasons)) or "ok"


def _time_to_target(row: Row) -> float | None:
    if not any(m.get("target_accuracy") is not None for m in row.metrics):
        return None
    return row.median(lambda m: math.inf if m["time_to_target_s"] is None
                      else m["time_to_target_s"])


def _cells(row: Row) -> dict[str, Cell]:
    throughput = [m["throughput"] for m in row.metrics]
    devices = row.per_position(lambda m: m["peak_device_mb"])
    no_device = NO_DEVICE if row.metrics else None
    return {
        "backend": row.backend, "devices": row.devices, "launcher": row.launcher,
        "status": _status(row.runs), "runs": f"{len(throughput)}/{len(row.runs)}",
        "samples/s": _median(throughput), "samples/s min": min(throughput, default=None),
        "samples/s max": max(throughput, default=None),
        "step ms p50": row.median(lambda m: m["step_time_ms"]["median"]),
        "step ms p90": row.median(lambda m: m["step_time_ms"]["p90"]),
        "startup s": row.median(lambda m: m["startup_s"]),
        "first step s": row.median(lambda m: m["first_step_s"]),
        "accuracy": row.median(lambda m: m["final_accuracy"]),
        "loss": row.median(lambda m: m["final_loss"]),
        "time to target s": _time_to_target(row),
        "peak RSS MiB": row.median(lambda m: max(m["peak_rss_mb"])),
        "RSS MiB per rank": row.per_position(lambda m: m["peak_rss_mb"]),
        "peak device MiB": row.median(lambda m: max(m["peak_device_mb"] or [], default=None))
        if devices else no_device,
        "device MiB per device": devices or no_device,
    }


def _efficiency(row: Row, rows: list[Row]) -> float | None:
    throughput = row.cells["samples/s"]
    if throughput is None:
        return None
    for backend in (SINGLE.get(row.framework), row.backend):
        # the same launcher first, where a backend has several
        refs = sorted((r for r in rows if r.backend == backend and r.devices == 1
                       and r.cells["samples/s"] is not None),
                      key=lambda r: r.launcher != row.launcher)
        if refs:
            return throughput / (row.devices * refs[0].cells["samples/s"])
    return None


def _title(sha: str, records: list[dict]) -> str:
    """What the spec fixes; a field that differs within it (batch mode) shows its values."""
    def values(get: Callable[[dict], object], of: list[dict] = records) -> str:
        return "/".join(dict.fromkeys(str(get(r)) for r in of))

    steps = values(lambda r: r["steps"])
    return (f"spec {sha[:10]}: model {values(lambda r: r['model'])}, dataset "
            f"{values(lambda r: r['dataset'])}, global batch "
            f"{values(lambda r: r['global_batch'])} ({values(lambda r: r['batch_mode'])} batch "
            f"fixed), {steps} steps, lr {values(lambda r: r['lr'])}, seed "
            f"{values(lambda r: r['seed'])}")


def build_groups(records: list[dict]) -> list[Group]:
    """One group per spec_sha256, one row per backend x devices x launcher, single first."""
    by_spec: dict[str, dict[tuple, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        key = (r["framework"], r["backend"], r["world_size"], r["launcher"])
        by_spec[r["spec_sha256"]][key].append(r)
    groups = []
    for sha in sorted(by_spec):
        order = sorted(by_spec[sha], key=lambda k: (k[0], k[1] != SINGLE.get(k[0]), *k[1:]))
        rows = [Row(*key, runs=sorted(by_spec[sha][key], key=lambda r: r["repeat"]))
                for key in order]
        for row in rows:
            row.cells = _cells(row)
        for row in rows:
            row.cells["scaling eff."] = _efficiency(row, rows)
        groups.append(Group(sha, _title(sha, [r for row in rows for r in row.runs]), rows))
    return groups


def _environment(groups: list[Group]) -> list[dict[str, Cell]]:
    """One row per distinct environment of a backend x devices x launcher, counting its runs."""
    rows: dict[tuple, dict[str, Cell]] = {}
    for group in groups:
        for row in group.rows:
            for r in row.runs:
                env = r["env"]
                names = ", ".join(f"{n}x {name}" for name, n in Counter(env["device_names"])
                                  .items()) or None
                cells = {"spec": group.sha[:10], **{k: row.cells[k] for k in KEY},
                         "python": env["python"], "OS": env["os"], "CPU": env["cpu_model"],
                         "cores": env["cores"], "threads/worker": env["threads_per_worker"],
                         "framework": r["framework"], "version": env["framework_version"],
                         "device names": names, "CUDA": env["cuda_version"],
                         "NCCL": env["nccl_version"], "git commit": env["git_commit"]}
                key = tuple(map(str, cells.values()))
                rows.setdefault(key, {**cells, "runs": 0})["runs"] += 1
    return list(rows.values())


def cell_text(value: Cell, exact: bool = False) -> str:
    """A cell for reading (4 significant digits) or, ``exact``, for machines (round-trips)."""
    if value is None:
        return "" if exact else "-"
    if isinstance(value, list):
        return " / ".join(cell_text(v, exact) for v in value)
    if isinstance(value, float):
        if math.isinf(value):
            return NOT_REACHED
        return repr(value) if exact else np.format_float_positional(
            value, precision=4, unique=False, fractional=False, trim="-")
    return str(value)


@dataclass
class Table:
    caption: str
    headers: tuple[str, ...]
    rows: list[list[str]]


@dataclass
class Section:
    heading: str
    spec: str | None  # the spec_sha256 whose plots belong here
    tables: list[Table]


def _table(caption: str, headers: tuple[str, ...], rows: list[dict[str, Cell]]) -> Table:
    return Table(caption, headers, [[cell_text(row[h]) for h in headers] for row in rows])


def document(groups: list[Group]) -> tuple[str, list[str], list[Section]]:
    """(title, notes, sections): what the Markdown and the HTML report both show."""
    records = sum(len(row.runs) for g in groups for row in g.rows)
    notes = [f"{records} record(s) of {len(groups)} spec(s)."]
    if len(groups) > 1:
        notes.append(f"The records hold {len(groups)} different specs (spec_sha256): runs of "
                     "different specs are never compared, each spec has its own tables.")
    sections = [Section(g.title, g.sha, [
        _table("Performance", PERFORMANCE, [row.cells for row in g.rows]),
        _table("Accuracy and memory", QUALITY, [row.cells for row in g.rows])])
        for g in groups]
    sections.append(Section("Environment", None, [
        _table("Environment of every run", ENVIRONMENT, _environment(groups))]))
    return "parbench report", [*notes, *NOTES], sections


def to_markdown(title: str, notes: list[str], sections: list[Section]) -> str:
    parts = [f"# {title}", *notes]
    for section in sections:
        parts.append(f"## {section.heading}")
        for table in section.tables:
            # a record's '|' or newline would otherwise break the table
            rows = [[c.replace("|", "\\|").replace("\n", " ") for c in row] for row in table.rows]
            parts += [f"### {table.caption}",
                      tabulate(rows, headers=table.headers, tablefmt="github",
                               disable_numparse=True)]
    return "\n\n".join(parts) + "\n"


def to_csv(groups: list[Group]) -> str:
    """One table, every row with its spec; numbers exact, lists ' / '-separated."""
    out = io.StringIO()
    columns = ("spec_sha256", *PERFORMANCE, *QUALITY[len(KEY):])
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for group in groups:
        writer.writerows({"spec_sha256": group.sha,
                          **{c: cell_text(row.cells[c], exact=True) for c in columns[1:]}}
                         for row in group.rows)
    return out.getvalue()


def render(records: list[dict], fmt: str = "md") -> str:
    """The report as Markdown or CSV text (HTML needs plots: html_report.write_report)."""
    if fmt not in ("md", "csv"):
        raise ValueError(f"render() makes md or csv, not {fmt!r}")
    groups = build_groups(records)
    return to_csv(groups) if fmt == "csv" else to_markdown(*document(groups))
