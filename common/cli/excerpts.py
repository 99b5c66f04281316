"""Code excerpts in docs that cannot rot: each fenced block below a marker

    <!-- excerpt: frameworks/torch/ddp.py#step -->        (a '# --- step' section, to the
                                                          next, a dedent or a script's
                                                          ``if __name__ ==`` line)
    <!-- excerpt: frameworks/torch/ddp.py::main -->       (a function or class)

is the named part of the source, verbatim (dedented). ``python -m parbench.cli.excerpts DOC``
rewrites the blocks from the sources; ``--check`` only reports blocks that differ.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
import textwrap
from pathlib import Path

MARKER = re.compile(r"<!-- excerpt: (?P<path>[\w./-]+)"
                    r"(?:#(?P<section>[\w ]+)|::(?P<name>\w+)) -->\n```python\n(?P<body>.*?)```",
                    re.S)


def _section(lines: list[str], section: str, path: str) -> str:
    starts = [i for i, line in enumerate(lines)
              if re.match(rf"\s*# --- {re.escape(section)}\b", line)]
    if len(starts) != 1:
        raise ValueError(f"{path}: {len(starts)} '# --- {section}' markers, need exactly 1")
    start = starts[0]
    indent = len(lines[start]) - len(lines[start].lstrip())
    end = start + 1
    while end < len(lines):
        line = lines[end]
        if line.lstrip().startswith(("# ---", "if __name__ ==")) or (
                line.strip() and len(line) - len(line.lstrip()) < indent):
            break
        end += 1
    return textwrap.dedent("\n".join(lines[start:end])).strip() + "\n"


def _definition(source: str, name: str, path: str) -> str:
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            first = node.decorator_list[0].lineno if node.decorator_list else node.lineno
            return "\n".join(source.splitlines()[first - 1:node.end_lineno]) + "\n"
    raise ValueError(f"{path}: no top-level function or class {name!r}")


def excerpt(root: Path, path: str, section: str | None, name: str | None) -> str:
    source = (root / path).read_text()
    return _section(source.splitlines(), section, path) if section else \
        _definition(source, name, path)


def refresh(doc: Path, root: Path) -> tuple[str, list[str]]:
    """(the doc with every excerpt re-taken from its source, the excerpts that had changed)."""
    stale: list[str] = []

    def replace(match: re.Match) -> str:
        current = excerpt(root, match["path"], match["section"], match["name"])
        if current != match["body"]:
            stale.append(match.group(0).splitlines()[0])
        head = match.group(0).split("```python\n")[0]
        return f"{head}```python\n{current}```"

    return MARKER.sub(replace, doc.read_text()), stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="refresh or check code excerpts in a doc")
    parser.add_argument("doc", type=Path)
    parser.add_argument("--root", type=Path, default=Path("."), help="repository root")
    parser.add_argument("--check", action="store_true", help="report stale excerpts only")
    args = parser.parse_args(argv)
    text, stale = refresh(args.doc, args.root)
    for marker in stale:
        print(f"stale: {marker}")
    if not args.check:
        args.doc.write_text(text)
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
