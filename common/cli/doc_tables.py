"""Report tables in docs that cannot rot: the block between a marker and the end marker

    <!-- table: results/reference/runs Headline -->
    <!-- table: results/reference/runs Accuracy and memory -->
    ...
    <!-- end table -->

is one table of ``parbench report results/reference/runs``, rendered as the report renders it:
the table and the notes under it, without its '### caption' line (the doc has its own
headings). The folder is relative to the repository root (--root), wherever the doc lives. The
name picks the table: a section heading ('Headline', 'Diverged runs', 'Profiles'), a table
caption ('Performance', 'Accuracy and memory', 'Per node'), or 'HEADING > CAPTION' where
either alone is ambiguous (a folder of several specs has a Headline table per spec); it must
name exactly one table. ``python -m parbench.cli.doc_tables FILE...`` rewrites the blocks from
the records; ``--check`` only lists the stale ones and exits 1 if there are any.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from parbench.results.groups import build_groups
from parbench.results.records import check_folder
from parbench.results.report import Table, document, markdown_table

START = re.compile(r"<!-- table: (?P<folder>[\w./-]+) (?P<name>\S.*?) -->")  # fullmatch
END = "<!-- end table -->"
SEPARATOR = " > "  # between a section heading and a table caption in a name


def _tables(folder: Path) -> list[tuple[str, Table]]:
    """(section heading, table) of every table of the report of ``folder``'s records."""
    found = check_folder(folder)
    if not found.records:
        raise ValueError(f"{folder}: no records (*.json) there")
    # parbench report skips an invalid record with a warning; a table in a doc is not
    # re-read by anyone who would see that warning, so here an invalid record is an error.
    if found.invalid:
        raise ValueError(f"{folder}: {len(found.invalid)} invalid record(s), first: "
                         f"{' '.join(found.problems[0].split())}")
    _, _, sections = document(build_groups(found.records))
    return [(section.heading, table) for section in sections for table in section.tables]


def _names(heading: str, table: Table) -> tuple[str, ...]:
    return heading, table.caption, f"{heading}{SEPARATOR}{table.caption}"


def _shortest_names(tables: list[tuple[str, Table]]) -> list[str]:
    """Per table, the shortest name that picks it alone: what an error offers instead."""
    every = [name for heading, table in tables for name in _names(heading, table)]
    return [next((n for n in _names(heading, table) if every.count(n) == 1),
                 _names(heading, table)[-1]) for heading, table in tables]


def block_text(tables: list[tuple[str, Table]], folder: str, name: str) -> str:
    """The block's text for ``name``: the report's own Markdown of that table (so it is byte
    for byte what parbench report prints), less the caption line."""
    hits = [table for heading, table in tables if name in _names(heading, table)]
    if len(hits) != 1:
        offered = "; ".join(repr(n) for n in _shortest_names(tables))
        what = "no table" if not hits else f"{len(hits)} tables match"
        raise ValueError(f"{folder}: {what} {name!r}; name one of: {offered}")
    return "\n\n".join(markdown_table(hits[0])[1:]) + "\n"


def _blocks(lines: list[str], doc: Path) -> list[tuple[int, int, re.Match]]:
    """(marker line, end-marker line, marker) of every block; a marker without its end before
    the next marker, or an end without a marker, is an error (never a guess)."""
    blocks, open_at = [], None
    for i, line in enumerate(lines):
        start = START.fullmatch(line)
        if line.startswith("<!-- table:") and not start:
            raise ValueError(f"{doc}:{i + 1}: not a table marker: {line!r} (want "
                             "'<!-- table: FOLDER NAME -->')")
        if start and open_at is not None:
            raise ValueError(f"{doc}:{open_at + 1}: '{lines[open_at]}' has no '{END}' before "
                             f"the next marker (line {i + 1})")
        if line == END and open_at is None:
            raise ValueError(f"{doc}:{i + 1}: '{END}' without a table marker before it")
        if start:
            open_at = i
        elif line == END:
            blocks.append((open_at, i, START.fullmatch(lines[open_at])))
            open_at = None
    if open_at is not None:
        raise ValueError(f"{doc}:{open_at + 1}: '{lines[open_at]}' has no '{END}'")
    return blocks


def refresh(doc: Path, root: Path) -> tuple[str, list[str]]:
    """(the doc with every block re-made from its records, 'doc:line: marker' of each block
    that had changed). The doc itself is not written."""
    lines = doc.read_text().split("\n")
    reports: dict[str, list[tuple[str, Table]]] = {}  # one report per folder, however many blocks
    stale, out, done = [], [], 0
    for start, end, marker in _blocks(lines, doc):
        folder = marker["folder"]
        if folder not in reports:
            reports[folder] = _tables(root / folder)
        body = ["", *block_text(reports[folder], folder, marker["name"]).split("\n")]
        if lines[start + 1:end] != body:
            stale.append(f"{doc}:{start + 1}: {lines[start]}")
        out += [*lines[done:start + 1], *body]
        done = end
    return "\n".join(out + lines[done:]), stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m parbench.cli.doc_tables",
        description="refresh or check the report tables in Markdown docs")
    parser.add_argument("docs", type=Path, nargs="+", metavar="FILE")
    parser.add_argument("--root", type=Path, default=Path("."),
                        help="repository root: the markers' folders are relative to it (.)")
    parser.add_argument("--check", action="store_true",
                        help="list stale tables only, write nothing; exit 1 if any")
    args = parser.parse_args(argv)
    every = []
    for doc in args.docs:
        try:
            text, stale = refresh(doc, args.root)
        except (OSError, ValueError) as err:
            print(f"doc_tables: error: {err}", file=sys.stderr)
            return 2
        for block in stale:
            print(f"stale: {block}")
        if stale and not args.check:
            doc.write_text(text)
        every += stale
    return 1 if every and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
