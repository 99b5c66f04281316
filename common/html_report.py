"""The report as files: the self-contained HTML page (tables and plots inline as PNG data
URIs, no external resources, so it opens offline and travels as one file), and the writing of
every report format and plot, atomically."""

from __future__ import annotations

import base64
import os
import tempfile
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING

from .config import UsageError
from .report import Group, Section, Table, build_groups, document, to_csv, to_markdown

if TYPE_CHECKING:
    from .plots import Plot  # imports matplotlib: only when plots are asked for

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 0.3em 0 1.5em; font-size: 0.9em; }
caption { text-align: left; font-weight: bold; padding: 0.3em 0; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.5em; text-align: right; }
th { background: #f2f2f2; }
td:first-child, th:first-child { text-align: left; }
figure { margin: 1em 0; }
img { max-width: 100%; }
"""


def _table(table: Table) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in table.headers)
    body = "\n".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>"
                     for row in table.rows)
    return (f"<table>\n<caption>{escape(table.caption)}</caption>\n"
            f"<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table>")


def _figure(plot: Plot) -> str:
    data = base64.b64encode(plot.png).decode("ascii")
    return (f'<figure><img src="data:image/png;base64,{data}" alt="{escape(plot.title)}">'
            f"<figcaption>{escape(plot.title)}</figcaption></figure>")


def to_html(title: str, notes: list[str], sections: list[Section], plots: list[Plot]) -> str:
    """The page; each section shows its tables, then the plots of its spec."""
    body = [f"<h1>{escape(title)}</h1>", *(f"<p>{escape(note)}</p>" for note in notes)]
    for section in sections:
        body.append(f"<h2>{escape(section.heading)}</h2>")
        body += [_table(table) for table in section.tables]
        body += [_figure(p) for p in plots if p.spec == section.spec]
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        f"<title>{escape(title)}</title>", f"<style>{STYLE}</style>", "</head>", "<body>",
        *body, "</body>", "</html>", ""])


def write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide the report from other users
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _make_plots(groups: list[Group]) -> list[Plot]:
    try:
        from .plots import make_plots  # matplotlib only when plots are asked for
    except ModuleNotFoundError as err:
        raise UsageError(f"plots need {err.name}: pip install 'parbench[report]'") from None
    return make_plots(groups)


def write_report(records: list[dict], fmt: str, output: Path | None = None,
                 plots_dir: Path | None = None) -> str:
    """The report (md, csv or html) as text; with ``output``/``plots_dir`` also as files (html:
    its plots as PNGs next to it). Everything is built in memory before anything is written,
    and each file is replaced atomically, so a failure leaves no half-written report."""
    groups = build_groups(records)
    plots = _make_plots(groups) if fmt == "html" or plots_dir is not None else []
    text = (to_html(*document(groups), plots) if fmt == "html" else
            to_csv(groups) if fmt == "csv" else to_markdown(*document(groups)))
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
