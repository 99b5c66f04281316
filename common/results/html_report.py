"""The report as files: the self-contained HTML page (tables and plots inline as PNG data
URIs, no external resources, so it opens offline and travels as one file), and the writing of
every report format and plot, atomically."""

from __future__ import annotations

import base64
import re
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING

from parbench.base.errors import UsageError
from parbench.base.files import write_atomic

from .report import NOT_REACHED, Section, Table, build_groups, document, to_csv, to_markdown
from .rows import NO_DEVICE, Group

if TYPE_CHECKING:
    from .plots import Plot  # imports matplotlib: only when plots are asked for

# Fits a 1400-px window: a table wider than the page scrolls inside its own box, a long
# status wraps, figures shrink to the page.
STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em 2em; color: #222; max-width: 1600px;
       overflow-wrap: break-word; }
h2 { margin-top: 1.8em; border-bottom: 1px solid #ccc; }
.scroll { overflow-x: auto; max-width: 100%; margin: 0.3em 0 1.2em; }
table { border-collapse: collapse; font-size: 0.85em; }
caption { text-align: left; font-weight: bold; padding: 0.3em 0; }
th, td { border: 1px solid #ccc; padding: 0.15em 0.45em; text-align: right; }
th { background: #f2f2f2; }
td { max-width: 26em; overflow-wrap: break-word; }
td:not(.text) { white-space: nowrap; }
.text { text-align: left; }
tr.first td { border-top: 2px solid #777; }
tr.noisy td { background: #fff4cc; }
tr.failed td { background: #fbdada; }
ul.notes { margin-top: 0; }
figure { margin: 1em 0 2em; }
img { max-width: 100%; height: auto; }
"""


# a cell_text number, a list of them, or a figure with its interval: "2400 (2290-2560)"
NUMBERS = re.compile(r"[-+.\deE]+( / [-+.\deE]+)*( \([.\deE]+-[.\deE]+\))?")


def _aligns(table: Table) -> list[str]:
    """' class="text"' for each column that holds text (left-aligned), '' for numbers."""
    def numeric(cells: list[str]) -> bool:
        present = [c for c in cells if c not in ("", "-", NO_DEVICE, NOT_REACHED)]
        return all(NUMBERS.fullmatch(c) for c in present)

    return ["" if numeric(list(cells)) else ' class="text"' for cells in zip(*table.rows)]


def _table(table: Table) -> str:
    """The table in its scrolling box, rows classed by their marks, then its notes."""
    aligns = _aligns(table) if table.rows else [""] * len(table.headers)
    head = "".join(f"<th{a}>{escape(h)}</th>" for h, a in zip(table.headers, aligns))
    rows = ["".join(f"<td{a}>{escape(c)}</td>" for c, a in zip(row, aligns))
            for row in table.rows]
    body = "\n".join((f'<tr class="{mark}">' if mark else "<tr>") + f"{row}</tr>"
                     for row, mark in zip(rows, table.marks))
    notes = "".join(f"<li>{escape(note)}</li>" for note in table.notes)
    return (f'<div class="scroll"><table>\n<caption>{escape(table.caption)}</caption>\n'
            f"<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table></div>"
            + (f'\n<ul class="notes">{notes}</ul>' if notes else ""))


def _figure(plot: Plot) -> str:
    data = base64.b64encode(plot.png).decode("ascii")
    return (f'<figure><img src="data:image/png;base64,{data}" alt="{escape(plot.title)}">'
            f"<figcaption>{escape(plot.title)}</figcaption></figure>")


def to_html(title: str, intro: list[str], sections: list[Section], plots: list[Plot]) -> str:
    """The page; each table of a spec is followed by the plots drawn from it, and a plot drawn
    for a whole section (the headline's forest plot) opens it, before its notes and tables: the
    answer as a picture first."""
    body = [f"<h1>{escape(title)}</h1>", *(f"<p>{escape(line)}</p>" for line in intro)]
    for section in sections:
        body.append(f"<h2>{escape(section.heading)}</h2>")
        body += [_figure(p) for p in plots if p.table == section.heading]
        body += [f"<p>{escape(note)}</p>" for note in section.notes]
        for table in section.tables:
            body.append(_table(table))
            body += [_figure(p) for p in plots
                     if p.spec == section.spec and p.table == table.caption]
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        f"<title>{escape(title)}</title>", f"<style>{STYLE}</style>", "</head>", "<body>",
        *body, "</body>", "</html>", ""])


def _make_plots(groups: list[Group]) -> list[Plot]:
    try:
        from .plots import make_plots  # matplotlib only when plots are asked for
    except ModuleNotFoundError as err:
        raise UsageError(f"plots need {err.name}: pip install 'parbench[report]'") from None
    return make_plots(groups)


def write_report(records: list[dict], fmt: str, output: Path | None = None,
                 plots_dir: Path | None = None, unreadable: dict[str, str] | None = None) -> str:
    """The report (md, csv or html) as text; with ``output``/``plots_dir`` also as files (html:
    its plots as PNGs next to it). Everything is built in memory before anything is written,
    and each file is replaced atomically, so a failure leaves no half-written report.
    ``unreadable`` (file -> reason: the files skipped) gets a section of its own in md and html;
    the CSV, one row per record read, leaves them out."""
    groups = build_groups(records)
    plots = _make_plots(groups) if fmt == "html" or plots_dir is not None else []
    text = (to_html(*document(groups, unreadable), plots) if fmt == "html" else
            to_csv(groups) if fmt == "csv" else to_markdown(*document(groups, unreadable)))
    files = {plots_dir / f"{p.name}.png": p.png for p in plots} if plots_dir else {}
    if output is not None:
        if fmt == "html":
            files.update({output.with_name(f"{output.stem}-{p.name}.png"): p.png for p in plots})
        files[output] = text.encode()  # last: a report on disk means its plots are there too
    for path, data in files.items():
        try:
            write_atomic(path, data)
        except OSError as err:
            raise UsageError(f"cannot write {path}: {err.strerror or err}") from None
    return text
