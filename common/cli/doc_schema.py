"""The record's lists in docs/records.md, made from what validates records: the schema versions
(``SCHEMA_VERSION`` and the comment above it in parbench.results.records, the one place each
version's additions are written down) and every field of the schema with its type and when it
is required (record_schema.json as parbench.results.records completes it from the registry,
the tasks and MODES). A version without its line in that comment, or a field the doc's list
lacks, fails the doc check instead of going unmentioned.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from parbench.results import records
from parbench.results.records import SCHEMA, SCHEMA_VERSION

from .doc_lists import code, table

FIRST = "the first records"  # version 1 has no line of its own: it is where the list starts
NESTED = ("metrics", "env", "modes")  # the objects whose fields get rows of their own


def version_comment() -> tuple[dict[int, str], str]:
    """({version: what it added}, the remark after the last one) from the comment that follows
    ``SCHEMA_VERSION =`` in records.py."""
    lines = inspect.getsource(records).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("SCHEMA_VERSION ="))
    comment = [lines[start].split("#", 1)[1]]
    for line in lines[start + 1:]:
        if not line.startswith("#"):
            break
        comment.append(line[1:])
    text = " ".join(part.strip() for part in comment)
    parts = re.split(r"(?:^|(?<=[;.]) )(\d+): ", text)[1:]
    added = {int(v): what.strip().rstrip(";") for v, what in zip(parts[::2], parts[1::2])}
    last, _, remark = added[max(added)].partition(". ")
    added[max(added)] = last.rstrip(".")
    return added, remark.strip()


def versions_list(args: list[str], root: Path) -> str:
    """One row per schema version the schema accepts, from the comment; the two must agree."""
    added, _ = version_comment()  # the remark is prose: the doc says it in its own words
    accepted = SCHEMA["properties"]["schema_version"]["enum"]
    written = sorted([1, *added])
    if written != accepted or max(accepted) != SCHEMA_VERSION:
        raise ValueError(f"records.py: SCHEMA_VERSION {SCHEMA_VERSION}, the schema accepts "
                         f"{accepted}, its comment describes {written}: make them agree")
    rows = [[v, FIRST if v == 1 else _fields_in_code(added[v])] for v in written]
    return (f"Records of schema {SCHEMA_VERSION} are written today; versions "
            f"{min(accepted)} to {max(accepted)} are read.\n\n"
            + table(["version", "added"], rows))


def _fields_in_code(text: str) -> str:
    """Field names (dotted, or with an underscore) in backquotes, as the docs write them."""
    return re.sub(r"(?<![\w`.])([a-z]+(?:[._][a-z0-9_]+)+)(?![\w`(])", r"`\1`", text)


def _type(entry: dict) -> str:
    if "enum" in entry:
        return "one of " + ", ".join(code("null" if v is None else str(v))
                                     for v in entry["enum"])
    if "const" in entry:
        return code(entry["const"])
    kinds = entry.get("type", "any (not checked)")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if "array" in kinds and "type" in entry.get("items", {}):
        kinds = [f"array of {_type(entry['items'])}" if k == "array" else k for k in kinds]
    return " or ".join(kinds)


def _holds(entry: dict) -> str:
    """The keys of an object field, or of the objects in an array field."""
    inner = entry.get("items", entry) if "items" in entry else entry
    keys = dict.fromkeys([*inner.get("required", []), *inner.get("properties", {})])
    return ", ".join(keys)


def _condition(rule: dict) -> str:
    """An allOf rule's condition in words: 'schema 5+', 'status diverged', 'language-modeling,
    schema 7+'."""
    test = rule["if"].get("properties", {})
    words = [f"{key} {value['const']}" if key == "status" else value["const"]
             for key, value in test.items() if "const" in value]
    version = test.get("schema_version", {})
    since = version.get("minimum", min(version.get("enum", [0]) or [0]))
    return ", ".join([*words, *([f"schema {since}+"] if since else [])])


def _required_by(then: dict, prefix: str) -> list[str]:
    """The dotted paths a rule's 'then' requires, through properties and 'if object' wrappers."""
    paths = [prefix + name for name in then.get("required", [])]
    for name, inner in then.get("properties", {}).items():
        paths += _required_by(inner, f"{prefix}{name}.")
    return paths + (_required_by(then["then"], prefix) if "then" in then else [])


def requirements() -> dict[str, list[str]]:
    """Dotted path -> when it is required: 'always', or each rule's condition."""
    when: dict[str, list[str]] = {}
    for path in _required_by({"required": SCHEMA["required"]}, ""):
        when.setdefault(path, []).append("always")
    for name in NESTED:
        for path in _required_by(SCHEMA["properties"][name], f"{name}."):
            when.setdefault(path, []).append("always" if name != "metrics" else "ok records")
    for rule in SCHEMA["allOf"]:
        for path in _required_by(rule["then"], ""):
            when.setdefault(path, []).append(_condition(rule))
    return when


def _fields(entry: dict, prefix: str) -> list[tuple[str, dict]]:
    names = dict.fromkeys([*entry.get("required", []), *entry.get("properties", {})])
    return [(prefix + name, entry.get("properties", {}).get(name, {})) for name in names]


def fields_list(args: list[str], root: Path) -> str:
    """Every field of the schema: the record's own, then those of metrics, env and modes."""
    when = requirements()
    rows = []
    for path, entry in _fields(SCHEMA, ""):
        rows.append(_row(path, entry, when))
        if path in NESTED:
            rows += [_row(inner, sub, when) for inner, sub in _fields(entry, f"{path}.")]
    return ("Every field the schema names (`common/results/record_schema.json`, with the "
            "frameworks, tasks and modes filled in from the code). Required: `always`, in "
            "every `ok` record's `metrics`, or from the schema version or for the status or "
            "task named; a field required nowhere is optional.\n\n"
            + table(["field", "type", "required", "holds"], rows))


def _row(path: str, entry: dict, when: dict[str, list[str]]) -> list[str]:
    return [code(path), _type(entry), "; ".join(when.get(path, ["optional"])), _holds(entry)]
