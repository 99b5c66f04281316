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
name exactly one table.

The same command fills list blocks, made from the code rather than the records (doc_lists,
doc_schema, doc_ports: the modes, the backends, the record's fields, the launchers' ports) or
from where records were made (doc_folders):

    <!-- list: NAME [ARG...] -->
    <!-- end list -->

``python -m parbench.cli.doc_tables FILE...`` rewrites the blocks; ``--folders results`` also
writes the README.md each folder of records lacks and refreshes every README.md there;
``--check`` only lists the stale (and missing) ones and exits 1 if there are any.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from parbench.results.groups import build_groups
from parbench.results.records import check_folder
from parbench.results.report import Table, document, markdown_table

from . import doc_folders, doc_lists, doc_ports, doc_schema

START = re.compile(r"<!-- table: (?P<folder>[\w./-]+) (?P<name>\S.*?) -->")  # fullmatch
END = "<!-- end table -->"
LIST = re.compile(r"<!-- list: (?P<name>[\w-]+)(?P<args>(?: [\w./-]+)*) -->")  # fullmatch
LIST_END = "<!-- end list -->"
# (marker, its end, how a marker line of the kind starts, its form) per kind of block
KINDS = {"table": (START, END, "<!-- table:", "<!-- table: FOLDER NAME -->"),
         "list": (LIST, LIST_END, "<!-- list:", "<!-- list: NAME [ARG...] -->")}
LISTS = {"modes": doc_lists.modes_list, "mode-support": doc_lists.mode_support,
         "backends": doc_lists.backends_list, "schema-versions": doc_schema.versions_list,
         "record-fields": doc_schema.fields_list, "launchers": doc_ports.launchers_list,
         "provenance": doc_folders.provenance_list, "folders": doc_folders.folders_list}
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


def _marker(line: str, doc: Path, number: int) -> tuple[str, re.Match] | None:
    """(kind, match) of a marker line, None for any other line; a line that starts like a
    marker but is not one is an error (never a guess)."""
    for kind, (start, _, prefix, form) in KINDS.items():
        if line.startswith(prefix):
            found = start.fullmatch(line)
            if not found:
                raise ValueError(f"{doc}:{number}: not a {kind} marker: {line!r} (want "
                                 f"'{form}')")
            return kind, found
    return None


def _blocks(lines: list[str], doc: Path) -> list[tuple[int, int, str, re.Match]]:
    """(marker line, end-marker line, kind, marker) of every block; a marker without its end
    before the next marker, or an end without a marker, is an error (never a guess)."""
    blocks, open_at, opened = [], None, None
    ends = {end: kind for kind, (_, end, _, _) in KINDS.items()}
    for i, line in enumerate(lines):
        marker = _marker(line, doc, i + 1)
        if marker and open_at is not None:
            raise ValueError(f"{doc}:{open_at + 1}: '{lines[open_at]}' has no "
                             f"'{KINDS[opened[0]][1]}' before the next marker (line {i + 1})")
        if line in ends and (open_at is None or ends[line] != opened[0]):
            raise ValueError(f"{doc}:{i + 1}: '{line}' without a {ends[line]} marker before it")
        if marker:
            open_at, opened = i, marker
        elif line in ends:
            blocks.append((open_at, i, *opened))
            open_at = None
    if open_at is not None:
        raise ValueError(f"{doc}:{open_at + 1}: '{lines[open_at]}' has no "
                         f"'{KINDS[opened[0]][1]}'")
    return blocks


def list_text(name: str, args: list[str], root: Path) -> str:
    """A list block's text, from the code (or the records' provenance) as it is today."""
    if name not in LISTS:
        raise ValueError(f"no list {name!r}; name one of: {', '.join(LISTS)}")
    return LISTS[name](args, root)


def refresh(doc: Path, root: Path) -> tuple[str, list[str]]:
    """(the doc with every block re-made from its records or the code, 'doc:line: marker' of
    each block that had changed). The doc itself is not written."""
    lines = doc.read_text().split("\n")
    reports: dict[str, list[tuple[str, Table]]] = {}  # one report per folder, however many blocks
    stale, out, done = [], [], 0
    for start, end, kind, marker in _blocks(lines, doc):
        if kind == "list":
            text = list_text(marker["name"], marker["args"].split(), root)
        else:
            folder = marker["folder"]
            if folder not in reports:
                reports[folder] = _tables(root / folder)
            text = block_text(reports[folder], folder, marker["name"])
        body = ["", *text.split("\n")]
        if lines[start + 1:end] != body:
            stale.append(f"{doc}:{start + 1}: {lines[start]}")
        out += [*lines[done:start + 1], *body]
        done = end
    return "\n".join(out + lines[done:]), stale


def folder_docs(top: Path, root: Path, check: bool) -> tuple[list[Path], list[str]]:
    """(every README.md under ``top``, a line for each folder of records without one): with
    ``check`` it is 'missing', else it is written first ('wrote'), to be filled like any doc."""
    missing = doc_folders.missing_readmes(top, root)
    if not check:
        for readme, text in missing:
            readme.write_text(text)
    said = "missing" if check else "wrote"
    return sorted(top.rglob("README.md")), [f"{said}: {readme}" for readme, _ in missing]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m parbench.cli.doc_tables",
        description="refresh or check the report tables and generated lists in Markdown docs")
    parser.add_argument("docs", type=Path, nargs="*", metavar="FILE")
    parser.add_argument("--root", type=Path, default=Path("."),
                        help="repository root: the markers' folders are relative to it (.)")
    parser.add_argument("--folders", type=Path, action="append", default=[], metavar="DIR",
                        help="also every README.md under DIR, written first where a folder "
                        "of records has none (results)")
    parser.add_argument("--check", action="store_true",
                        help="list stale blocks only, write nothing; exit 1 if any")
    args = parser.parse_args(argv)
    if not args.docs and not args.folders:
        parser.error("name a FILE or --folders DIR")
    docs, every = list(args.docs), []
    try:
        for top in args.folders:
            found, missing = folder_docs(top, args.root, args.check)
            docs, every = docs + found, every + missing
            print(*missing, sep="\n", end="\n" if missing else "")
        for doc in docs:
            text, stale = refresh(doc, args.root)
            if stale and not args.check:
                doc.write_text(text)
            every += stale
            print(*(f"stale: {block}" for block in stale), sep="\n", end="\n" if stale else "")
    except (OSError, ValueError) as err:
        print(f"doc_tables: error: {err}", file=sys.stderr)
        return 2
    return 1 if every and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
