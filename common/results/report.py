"""The comparison report: a headline, tables per spec and the environment of every run, as
Markdown or CSV, top-down in the order a reader wants them. rows.py computes the rows,
noderows.py splits a multi-node row by node, headline.py picks the headline's, html_report
builds the HTML page and writes report files, plots draws the figures."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from tabulate import tabulate

from parbench.contract.tasks import Task
from parbench.run.modes import MODES
from parbench.run.registry import FRAMEWORKS

from .envrows import COLUMNS as ENVIRONMENT
from .envrows import environment_rows
from .groups import build_groups
from .headline import NOTE as HEADLINE_NOTE
from .headline import headline_columns, headline_rows, limit_lines, tie_lines, warnings
from .intervals import BOOTSTRAP_RESAMPLES, REPEATS_FOR_T
from .noderows import node_rows
from .provenance import provenance_lines
from .records import BUSY_LOAD_PER_CORE
from .rows import (
    FLOPS_COLUMNS,
    KEY,
    MODE_COLUMNS,
    NOISY_CV_PERCENT,
    RUN_KEY,
    Cell,
    Group,
    Row,
    throughput_column,
)
from .sharding import COLUMNS as SHARDING_COLUMNS
from .sharding import NOTES as SHARDING_NOTES
from .sharding import sharded_pairs, sharding_cells, trade_line, unsharded_frameworks
from .tidy import to_csv

# left out of a table where no row has it: older records; MFU where no GPU has a datasheet
# peak; utilisation where no peak was measured
OPTIONAL = ("data wait %", "shared cores", "vs single same threads", *FLOPS_COLUMNS)
# a column with one value in every row is said once, in the table's note
SAID_ONCE = (*MODE_COLUMNS, "CI method")
PROFILES = (*KEY, "status", "runs", "forward ms", "backward ms", "optimizer ms",
            "communication ms", "step ms", "top ops (ms/step)")
DIVERGED = (*KEY, "repeats", "at step", "rank", "loss", "lr")
DIVERGED_NOTE = (
    "Runs whose training loss became NaN or infinite: each stopped at that step, on every rank "
    "together, with status diverged; they have no speed or accuracy figures and appear in no "
    "other table. at step: the 0-based step of each repeat; rank: the first rank whose loss "
    "was not finite; loss: that loss.")
PROFILE_NOTES = [
    "Runs made with --profile, kept out of every other table: the profiler's overhead is in "
    "their times. Per backend x devices: medians over the ok repeats of the slowest rank's "
    "median phase times, and the first repeat's top 3 operations by self time per step.",
    "Each record's <record>.profile.json has every rank, every profiled step and what each "
    "phase includes: " + "; ".join(f"{name}: {framework.profile_note}"
                                   for name, framework in FRAMEWORKS.items()
                                   if framework.profile_note) + ".",
]
PER_NODE = (*KEY, "node", "host", "ranks", "step ms p50", "scoring s", "scoring vs fastest",
            "data wait ms")
PER_NODE_NOTE = (
    "One row per node of each multi-node row; each figure is the median over the row's ok "
    "repeats. step ms p50 is alike on every node by construction: each step ends with the "
    "gradient all-reduce, which waits for the slowest rank, so it is the run's step time seen "
    "from each node (per step the slowest of the node's ranks, median over the steady steps). "
    "scoring s and data wait ms are each node's own, so a slow node (a slower machine, a busy "
    "one, a slow disk) stands out there. scoring s: the seconds the node's slowest rank took to "
    "score its part of the test set in the final evaluation (every rank scores an equal part), "
    "timed before any communication. scoring vs fastest: that time / the lowest such time among "
    "the row's nodes, so the fastest node is x1.00 and one 1.5 times slower x1.50. data wait "
    "ms: the mean time the node's ranks waited for each training batch (taking it from the "
    "arrays or the framework's loader). Records that predate scoring s and data wait ms show "
    "- there. host: the node's host name, several /-separated where the repeats ran on "
    "different machines.")
NODES_NOTE = (
    "Multi-node runs have rows of their own, after their framework's single-node rows, with "
    "devices shown as nodes x devices per node (2x1: 2 nodes of 1 device); in their scaling "
    "efficiency N is the device count over all nodes (world_size).")
NOT_REACHED = "not reached"


def performance_columns(task: type[Task]) -> tuple[str, ...]:
    """The Performance table's columns, throughput in the task's unit (and per device where
    the task asks for it: a language model's tokens/s)."""
    speed = throughput_column(task)
    per_device = (f"{speed} per device",) if task.per_device_throughput else ()
    return (*KEY, "status", "runs", speed, f"{speed} 95% CI", "CI method", *per_device, "cv %",
            "noisy", "scaling eff.", "shared cores", "vs single same threads", "step ms p50",
            "step ms p90", *FLOPS_COLUMNS, "data wait %", "startup s", "first step s")


def quality_columns(task: type[Task]) -> tuple[str, ...]:
    """The Accuracy and memory table's columns: the task's quality metrics, then memory."""
    return (*KEY, *task.quality_columns, "time to target s", "peak RSS MiB", "RSS MiB per rank",
            "peak device MiB", "device MiB per device")


def notes(speed: str) -> list[str]:
    """How the figures are made; ``speed`` names the throughput column(s) ('samples/s')."""
    return [
        "Each cell is the median over the row's ok repeats; runs counts ok/all repeats.",
        f"95% CI: the confidence interval of {speed} (and, in the CSV, of the median step "
        f"time). With {REPEATS_FOR_T} or more ok repeats: Student's t over the repeats, on the "
        "log of each repeat's figure (an interval of their geometric mean). With fewer: a "
        f"percentile bootstrap ({BOOTSTRAP_RESAMPLES} resamples) of the steady steps within "
        "each run (each resample draws every run's steps with replacement and takes the "
        "geometric mean of the runs' median step times); it knows nothing of run-to-run "
        "variation, so it is narrower than a t interval would be. CI method says which, and "
        "records before schema 10 with fewer repeats have none. A ratio of two figures (vs "
        "fastest, scaling eff., vs 1-dev, same threads) has the interval of the two log-scale "
        "half-widths added in quadrature.",
        f"cv % = sample standard deviation (ddof 1) / mean of {speed} over the ok repeats, x 100 "
        "(it needs 2 ok repeats). noisy names why a cell's speed is not to be trusted: cv (cv % "
        f"> {NOISY_CV_PERCENT:g}) and/or load (other processes used more than "
        f"{BUSY_LOAD_PER_CORE:g} x cores on average during a run, measured as their CPU time; "
        "where a record has no such measure, its 1-minute load average at the start decides); "
        "no otherwise. A record without a load reading (schema v1) counts as unknown, never as "
        "noisy.",
        f"Scaling efficiency = {speed} at N devices / (N x {speed} at 1 device), where the "
        "1-device reference is the framework's single backend, else the same backend at 1 "
        "device, in the same spec only. shared cores: where the N devices of a run are CPU "
        "devices of one machine, they share its cores (this many), so N devices cannot beat one "
        "process given all their threads and the efficiency reads low by design; vs single same "
        f"threads = {speed} / that of the framework's single backend run with as many threads "
        "per worker as the N devices had together (threads per worker x processes), the fair "
        "reference there (empty where no such run is in the records).",
        "Time to target is training time (sum of step times) until the first evaluation at or "
        "above the target accuracy; a repeat that never reached it counts as infinitely slow.",
        "Peak memory: host RSS per process (rank) and allocator peak per device; the lists are "
        "medians over repeats position by position, so an imbalance (DataParallel's device 0) "
        "shows.",
        f"Modes ({', '.join(MODE_COLUMNS)}) are part of a row's key: two modes never share a "
        "row, and the 1-device reference of a scaling efficiency has the same modes except "
        f"{', '.join(m.column for m in MODES.values() if not m.matters_on_one_device)}. A mode "
        "column that is the same in every row of a table is left out of it and named in the "
        "table's note.",
        "TFLOP/s = the model FLOPs of one step, from the spec (matrix products and attention, 2 "
        "per multiply-add, training = 3 x forward; norms, activations, the loss and the "
        "optimizer left out), / the median step time, all devices together and per device. "
        "util. % = TFLOP/s per device / the dense matmul peak 'parbench peak' measured on the "
        "run's machine with the same framework, version, compute dtype and threads per worker "
        "(empty where none was measured); MFU % = the same over the GPU's datasheet dense peak "
        "(empty on CPUs and unknown GPUs).",
        "data wait % = the time steps waited for their batch (taking it from the arrays or the "
        "framework's loader) as a share of that wait plus the step times, all ranks together; a "
        "loader that cannot keep up shows here rather than in the step time."]


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
    marks: list[str] = field(default_factory=list)  # per row: "first noisy failed" or ""
    notes: list[str] = field(default_factory=list)  # shown under the table


@dataclass
class Section:
    heading: str
    spec: str | None  # the spec_sha256 whose plots belong here
    tables: list[Table]
    notes: list[str] = field(default_factory=list)  # paragraphs before the tables


def _marks(rows: list[Row]) -> list[str]:
    """What a page may highlight in each row: the first row of a framework, noise, failure."""
    marks = []
    for i, row in enumerate(rows):
        marks.append(" ".join(name for name, hit in (
            ("first", i == 0 or rows[i - 1].framework != row.framework),
            ("noisy", row.cells["noisy"] != "no"), ("failed", row.cells["status"] != "ok"))
            if hit))
    return marks


def _table(caption: str, headers: tuple[str, ...], rows: list[dict[str, Cell]],
           marks: list[str] | None = None) -> Table:
    """The table of ``rows``; a mode column with one value in every row is said in the note
    instead (a report of plain runs shows no mode columns, only 'every row: fp32, ...'), and not
    at all when it applies to none of them."""
    same = [h for h in headers if h in SAID_ONCE and rows
            and len({cell_text(row[h]) for row in rows}) == 1]
    # a mode that applies to no row's backend ("-" in every row) is not said at all
    empty = [h for h in headers if h in OPTIONAL and all(row[h] is None for row in rows)] + \
        [h for h in same if cell_text(rows[0][h]) == "-"]
    same = [h for h in same if h not in empty]
    shown = tuple(h for h in headers if h not in same and h not in empty)
    table = Table(caption, shown, [[cell_text(row[h]) for h in shown] for row in rows],
                  marks or [""] * len(rows))
    if same:
        table.notes = ["Every row: " + ", ".join(f"{h} {cell_text(rows[0][h])}"
                                                 for h in same) + "."]
    return table


def _headline(group: Group) -> Table:
    best = headline_rows(group.rows)
    lines = [(row.nodes, row.devices, row.modes.label) for row, _ in best]
    table = _table(group.title, headline_columns(group.rows),
                   [cells for _, cells in best],
                   ["first" if i == 0 or lines[i - 1] != line else ""
                    for i, line in enumerate(lines)])
    table.notes += tie_lines(group.rows)
    table.notes += limit_lines(group.rows)
    table.notes += warnings(group.rows) or ["No noisy or failed cells."]
    if group.diverged:
        table.notes.append("Diverged, in no table but Diverged runs: "
                           + ", ".join(row.label for row in group.diverged) + ".")
    return table


def _per_node(group: Group) -> list[Table]:
    """The Per node table of a spec with a multi-node row that has ok repeats, else none;
    the first node of each row is marked, so the page separates the rows."""
    per_row = [node_rows(row) for row in group.rows]
    rows = [node for nodes in per_row for node in nodes]
    if not rows:
        return []
    table = _table("Per node", PER_NODE, rows,
                   ["first" if i == 0 else "" for nodes in per_row for i in range(len(nodes))])
    table.notes.insert(0, PER_NODE_NOTE)
    return [table]


def _environment(groups: list[Group]) -> Table:
    """The environments of the runs; a column that is the same in every row is said once, in
    the table's note, so the table shows what differs."""
    rows = environment_rows(groups)
    same = [h for h in ENVIRONMENT[len(RUN_KEY) + 2:] if len({cell_text(r[h]) for r in rows}) == 1]
    table = _table("Environment of every run", tuple(h for h in ENVIRONMENT if h not in same),
                   rows)
    if same:
        table.notes = ["The same in every run: " + ", ".join(
            f"{h} {cell_text(rows[0][h])}" for h in same) + "."]
    return table


def _methods(groups: list[Group]) -> list[str]:
    runs = [r for g in groups for row in g.rows for r in row.runs]
    unknown = sum(r["env"].get("load_1m_start") is None for r in runs)
    load = [f"{unknown} of {len(runs)} run(s) carry no load reading: their load is unknown."]
    nodes = [NODES_NOTE] if any(row.nodes > 1 for g in groups for row in g.rows) else []
    tasks = list(dict.fromkeys(g.task for g in groups))
    speed = " / ".join(throughput_column(task) for task in tasks)
    return [*notes(speed), *(task.quality_note for task in tasks), *nodes,
            *(load if unknown else [])]


def _sharding(groups: list[tuple[Group, list[tuple[Row, Row]]]]) -> Section:
    """Each spec's sharded rows beside their replicated twins, and the trade of each pair."""
    tables = []
    for group, pairs in groups:
        if pairs:
            rows = list({id(row): row for pair in pairs for row in pair}.values())  # once each
            table = _table(group.title, SHARDING_COLUMNS, [sharding_cells(row) for row in rows])
            table.notes = [*(trade_line(*pair) for pair in pairs), *table.notes]
            tables.append(table)
    unsharded = unsharded_frameworks([row for group, _ in groups for row in group.rows])
    return Section("Sharded against replicated", None, tables, [*SHARDING_NOTES, *unsharded])


def document(groups: list[Group]) -> tuple[str, list[str], list[Section]]:
    """(title, intro, sections): what the Markdown and the HTML report both show, top-down:
    the headline, each spec's tables (Per node only where a run spanned nodes), the profiled
    runs' phases (kept out of every other
    table), how the figures are made, the environment."""
    records = sum(len(row.runs) for g in groups for row in g.all_rows)
    intro = [f"{records} record(s) of {len(groups)} spec(s)."]
    if len(groups) > 1:
        intro.append(f"The records hold {len(groups)} different specs (spec_sha256): runs of "
                     "different specs are never compared, each spec has its own tables.")
    plain = [g for g in groups if g.rows]  # a spec with only profiled runs has no such tables
    speeds = " / ".join(dict.fromkeys(throughput_column(g.task) for g in plain))
    mixed = provenance_lines([r for g in groups for row in g.all_rows for r in row.runs])
    sections = [Section("Headline", None, [_headline(g) for g in plain],
                        [*mixed, HEADLINE_NOTE.format(speed=speeds)])] if plain else []
    sections += [Section(g.title, g.sha, [
        _table("Performance", performance_columns(g.task), [row.cells for row in g.rows],
               _marks(g.rows)),
        _table("Accuracy and memory", quality_columns(g.task), [row.cells for row in g.rows],
               _marks(g.rows)),
        *_per_node(g)])
        for g in plain]
    sharded = [(g, sharded_pairs(g.rows)) for g in plain]
    if any(pairs for _, pairs in sharded):
        sections.append(_sharding(sharded))
        sections[0].notes.append("Sharded data parallelism: " + " ".join(
            trade_line(*pair) for _, pairs in sharded for pair in pairs))
    diverged = [g for g in groups if g.diverged]
    if diverged:
        sections.append(Section("Diverged runs", None, [
            _table(g.title, DIVERGED, [row.cells for row in g.diverged]) for g in diverged],
            [DIVERGED_NOTE]))
    profiled = [g for g in groups if g.profiles]
    if profiled:
        sections.append(Section("Profiles", None, [
            _table(g.title, PROFILES, [row.cells for row in g.profiles]) for g in profiled],
            PROFILE_NOTES))
    sections.append(Section("How the figures are made", None, [], _methods(groups)))
    sections.append(Section("Environment", None, [_environment(groups)]))
    return "parbench report", intro, sections


def markdown_table(table: Table) -> list[str]:
    # a record's '|' or newline would otherwise break the table
    rows = [[c.replace("|", "\\|").replace("\n", " ") for c in row] for row in table.rows]
    return [f"### {table.caption}",
            tabulate(rows, headers=table.headers, tablefmt="github", disable_numparse=True),
            *(["\n".join(f"- {note}" for note in table.notes)] if table.notes else [])]


def to_markdown(title: str, intro: list[str], sections: list[Section]) -> str:
    parts = [f"# {title}", *intro]
    for section in sections:
        parts += [f"## {section.heading}", *section.notes]
        for table in section.tables:
            parts += markdown_table(table)
    return "\n\n".join(parts) + "\n"


def render(records: list[dict], fmt: str = "md") -> str:
    """The report as Markdown or CSV text (HTML needs plots: html_report.write_report)."""
    if fmt not in ("md", "csv"):
        raise ValueError(f"render() makes md or csv, not {fmt!r}")
    groups = build_groups(records)
    return to_csv(groups) if fmt == "csv" else to_markdown(*document(groups))
