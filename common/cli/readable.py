"""The records a report is made from: a folder checked as 'parbench check' checks it, its
unreadable files named and skipped; and whether the HTML report's plots can be drawn here."""

from __future__ import annotations

import sys
from pathlib import Path

from parbench.base.errors import UsageError
from parbench.results.records import FolderCheck, check_folder


def readable(folder: Path, strict: bool) -> FolderCheck:
    """``folder`` checked as 'parbench check' checks it, so the two agree on what is readable:
    each file check names (invalid, or a record of a newer schema, or of a task, model or
    framework this version does not know) is named on stderr with its reason and skipped, and
    the report is made from the rest; when ``strict``, or when no record is readable, the whole
    folder is refused."""
    found = check_folder(folder)
    if found.files == 0:
        raise UsageError(f"no records (*.json) under {folder}")
    if found.invalid and (strict or not found.records):
        first = " ".join(found.problems[0].split())  # the error is one line
        raise UsageError(f"{len(found.invalid)} invalid file(s) of the {found.files} under "
                         f"{folder}, first: {first}; see 'parbench check {folder}'")
    for file, reason in found.reasons.items():
        print(f"skipped {file}: {reason}", file=sys.stderr)
    return found


def readable_records(folder: Path, strict: bool) -> tuple[list[dict], dict[str, str]]:
    """The readable records under ``folder`` (see readable) and the skipped files' reasons,
    by their path in the folder, so a report reads the same wherever the folder is."""
    found = readable(folder, strict)
    return found.records, {str(Path(file).relative_to(folder)): reason
                           for file, reason in found.reasons.items()}



def has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401  (the HTML report's plots)
    except ImportError:
        return False
    return True
