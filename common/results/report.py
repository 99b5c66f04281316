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
from parbench.run.registry import FRAMEWORKS

from . import headline, segments
from .accuracy_change import (
    CHANGE_COLUMNS,
    CHANGE_NOTE,
    CHANGE_SAID_ONCE,
    GRID_CAPTION,
    GRID_NOTE,
    change_grid,
    change_rows,
    change_summary,
)
from .envrows import COLUMNS as ENVIRONMENT
from .envrows import environment_rows
from .groups import build_groups
from .methods import methods
from .noderows import node_rows
from .provenance import provenance_lines
from .rows import (
    CPU_COLUMNS,
    FLOPS_COLUMNS,
    KEY,
    MODE_COLUMNS,
    RUN_KEY,
    Cell,
    Group,
    Row,
    cpu_lines,
    throughput_column,
)
from .sharding import COLUMNS as SHARDING_COLUMNS
from .sharding import NOTES as SHARDING_NOTES
from .sharding import sharded_pairs, sharding_cells, trade_line, unsharded_frameworks
from .tidy import to_csv
from .time_to_target import AGAINST_ONE_DEVICE, NOT_REACHED, first_line, time_to_target_rows
from .time_to_target import COLUMNS as TIME_TO_TARGET
from .time_to_target import NOTE as TIME_TO_TARGET_NOTE
from .time_to_target import SAID_ONCE as TARGET_SAID_ONCE

# left out of a table where no row has it: older records; MFU where no GPU has a datasheet
# peak; utilisation where no peak was measured
OPTIONAL = ("data wait %", "shared cores", "vs single same threads", *FLOPS_COLUMNS,
            *CPU_COLUMNS, *AGAINST_ONE_DEVICE)
# a column with one value in every row is said once, in the table's note
SAID_ONCE = (*MODE_COLUMNS, "CI method", "ratio method", *CHANGE_SAID_ONCE, *TARGET_SAID_ONCE)
PROFILES = (*KEY, "status", "runs", "forward ms", "backward ms", "optimizer ms",
            "communication ms", "step ms", "top ops (ms/step)")
DIVERGED = (*KEY, "repeats", "at step", "rank", "loss", "lr")
DIVERGED_NOTE = (
    "Runs whose training loss became NaN or infinite: each stopped at that step, on every rank "
    "together, with status diverged; they have no speed or accuracy figures and appear in no "
    "other table. at step: the 0-based step of each repeat; rank: the first rank whose loss "
    "was not finite; loss: that loss.")
UNREADABLE = ("file", "reason")
UNREADABLE_HEADING = "Records this version cannot read"
UNREADABLE_NOTE = (
    "Files under the folder that this parbench cannot read, so no other table counts them: "
    "a record of a newer schema version, or of a task, model or framework this version does "
    "not know (written by a newer parbench, or edited by hand), or a file that is not a valid "
    "record. reason: the file's first problem; 'parbench check' lists every one.")
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


def performance_columns(task: type[Task]) -> tuple[str, ...]:
    """The Performance table's columns, throughput in the task's unit (and per device where
    the task asks for it: a language model's tokens/s)."""
    speed = throughput_column(task)
    per_device = (f"{speed} per device",) if task.per_device_throughput else ()
    return (*KEY, "status", "runs", speed, f"{speed} 95% CI", "CI method", *per_device, "cv %",
            "noisy", "scaling eff.", "shared cores", "vs single same threads", "step ms p50",
            "step ms 95% CI", "step ms p90", *FLOPS_COLUMNS, *CPU_COLUMNS, "data wait %",
            "startup s", "first step s")


def _with_notes(table: Table, notes: list[str]) -> Table:
    table.notes += notes
    return table


def quality_columns(task: type[Task]) -> tuple[str, ...]:
    """The Accuracy and memory table's columns: the task's quality metrics, then memory."""
    return (*KEY, *task.quality_columns, "time to target s", "peak RSS MiB", "RSS MiB per rank",
            "peak device MiB", "device MiB per device")


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
    best = headline.headline_rows(group.rows)
    lines = [(row.nodes, row.devices, row.modes.label) for row, _ in best]
    table = _table(group.title, headline.headline_columns(group.rows),
                   [cells for _, cells in best],
                   ["first" if i == 0 or lines[i - 1] != line else ""
                    for i, line in enumerate(lines)])
    if not best:
        table.notes.append("No framework's representative has an ok run in this spec.")
    table.notes += headline.tie_lines(group.rows)
    table.notes += headline.limit_lines(group.rows)
    table.notes += headline.warnings(group.rows) or ["No noisy or failed cells."]
    if group.diverged:
        table.notes.append("Diverged, in no table but Diverged runs: "
                           + ", ".join(row.label for row in group.diverged) + ".")
    return table


def _others(groups: list[Group]) -> list[Section]:
    """Each spec's other approaches, each against its framework's representative; none where
    no framework ran more than its representative."""
    tables = []
    for group in groups:
        rows = headline.others_rows(group.rows)
        if rows:
            lines = [tuple(row[c] for c in ("devices", *MODE_COLUMNS)) for row in rows]
            tables.append(_table(group.title, headline.others_columns(group.rows), rows,
                                 ["first" if i == 0 or lines[i - 1] != line else ""
                                  for i, line in enumerate(lines)]))
    speeds = " / ".join(dict.fromkeys(throughput_column(g.task) for g in groups))
    return [Section(headline.OTHERS, None, tables,
                    [headline.OTHERS_NOTE.format(speed=speeds)])] if tables else []


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


def _unreadable(unreadable: dict[str, str]) -> Section:
    """The files the report skipped, each with why: listed apart, as diverged runs are, so a
    reader sees what the tables leave out without reading stderr."""
    rows: list[dict[str, Cell]] = [{"file": file, "reason": reason}
                                   for file, reason in unreadable.items()]
    return Section(UNREADABLE_HEADING, None, [_table("Skipped files", UNREADABLE, rows)],
                   [UNREADABLE_NOTE])


def document(groups: list[Group],
             unreadable: dict[str, str] | None = None) -> tuple[str, list[str], list[Section]]:
    """(title, intro, sections): what the Markdown and the HTML report both show, top-down:
    the headline, each framework's other approaches against its representative, each spec's
    tables (Per node only where a run spanned nodes), the profiled runs' phases (kept out of
    every other table), the files this version cannot read (``unreadable``: file -> reason,
    where any), how the figures are made, the environment."""
    records = sum(len(row.runs) for g in groups for row in g.all_rows)
    intro = [f"{records} record(s) of {len(groups)} spec(s)."]
    if unreadable:
        intro.append(f"{len(unreadable)} file(s) this version cannot read are in no table: "
                     f"see {UNREADABLE_HEADING}.")
    if len(groups) > 1:
        intro.append(f"The records hold {len(groups)} different specs (spec_sha256): runs of "
                     "different specs are never compared, each spec has its own tables.")
    plain = [g for g in groups if g.rows]  # a spec with only profiled runs has no such tables
    speeds = " / ".join(dict.fromkeys(throughput_column(g.task) for g in plain))
    mixed = provenance_lines([r for g in groups for row in g.all_rows for r in row.runs])
    sections = [Section(headline.HEADING, None, [_headline(g) for g in plain],
                        [*mixed, headline.note(speeds)]), *_others(plain)] if plain else []
    sections += [Section(g.title, g.sha, [
        _with_notes(_table("Performance", performance_columns(g.task),
                           [row.cells for row in g.rows], _marks(g.rows)), cpu_lines(g.rows)),
        _table("Accuracy and memory", quality_columns(g.task), [row.cells for row in g.rows],
               _marks(g.rows)),
        *_per_node(g)])
        for g in plain]
    sharded = [(g, sharded_pairs(g.rows)) for g in plain]
    if any(pairs for _, pairs in sharded):
        sections.append(_sharding(sharded))
        sections[0].notes.append("Sharded data parallelism: " + " ".join(
            trade_line(*pair) for _, pairs in sharded for pair in pairs))
    changes = change_rows([r for g in groups for row in g.all_rows for r in row.runs])
    if change_summary(changes):  # second: the question people bring after "which is fastest"
        grid_headers, grid = change_grid(changes)
        glance = [_table(GRID_CAPTION, grid_headers, grid)] if grid else []
        for table in glance:
            table.notes.insert(0, GRID_NOTE)
        sections.insert(1, Section("Did N devices change the result", None, [
            *glance, _table("Quality at N devices against 1 device", CHANGE_COLUMNS, changes)],
            [CHANGE_NOTE]))
        sections[0].notes.append(change_summary(changes))
    _add_time_to_target(sections, [r for g in groups for row in g.all_rows for r in row.runs])
    diverged = [g for g in groups if g.diverged]
    if diverged:
        sections.append(Section("Diverged runs", None, [
            _table(g.title, DIVERGED, [row.cells for row in g.diverged]) for g in diverged],
            [DIVERGED_NOTE]))
    resumed = segments.rows([r for g in groups for row in g.all_rows for r in row.runs])
    if resumed:
        sections.append(Section(segments.HEADING, None, [
            _table("Segments of each resumed training", segments.COLUMNS, resumed)],
            [segments.NOTE]))
    profiled = [g for g in groups if g.profiles]
    if profiled:
        sections.append(Section("Profiles", None, [
            _table(g.title, PROFILES, [row.cells for row in g.profiles]) for g in profiled],
            PROFILE_NOTES))
    if unreadable:
        sections.append(_unreadable(unreadable))
    sections.append(Section("How the figures are made", None, [], methods(groups)))
    sections.append(Section("Environment", None, [_environment(groups)]))
    return "parbench report", intro, sections


def _add_time_to_target(sections: list[Section], records: list[dict]) -> None:
    """Time to target, right after the headline (the field's ranking: MLPerf, DAWNBench),
    where runs had a --target; its first line joins the headline's notes."""
    rows = time_to_target_rows(records)
    if not rows:
        return
    sections.insert(1, Section("Time to target", None, [
        _table("Time to target, over seeds", TIME_TO_TARGET, rows)], [TIME_TO_TARGET_NOTE]))
    if sections[0].heading == headline.HEADING:
        sections[0].notes.append(first_line(rows))


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
