"""Files and folders written whole or not at all: a reader (the harness polling a worker, a
report over a folder being written, a resumed sweep) never sees half a file. And parbench's
temporary folders, named so that a later parbench removes those a killed process left
behind."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

from .errors import UsageError


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide results from other users
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def check_new_folder(target: Path, writer: str) -> None:
    """UsageError unless ``target`` can become a new folder: absent or empty, in a folder that
    exists (``writer``: the command, for the message)."""
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise UsageError(f"{target} exists and is not an empty folder; {writer} writes a new one")
    if not target.parent.is_dir():
        raise UsageError(f"{target.parent}: no such folder")


@contextmanager
def new_folder(target: Path) -> Iterator[Path]:
    """A folder that appears at ``target`` whole or not at all: the block writes into the
    staging folder it is given (beside ``target``, so the rename stays on one file system),
    which is renamed into place when the block ends and removed if it raises."""
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        yield staging
        if target.exists():
            target.rmdir()
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


TEMP_PREFIXES = ("parbench-run-", "parbench-inputs-", "parbench-parity-")


def private_tempdir(prefix: str) -> tempfile.TemporaryDirectory:
    """A temporary folder whose name carries this process's pid, so a later parbench can tell
    that it was left behind by a process that no longer exists (see remove_stale_tempdirs)."""
    return tempfile.TemporaryDirectory(prefix=f"{prefix}{os.getpid()}-")


def remove_stale_tempdirs() -> list[Path]:
    """Delete parbench temporary folders of this user whose process is gone (one that was
    SIGKILLed could not clean up after itself); returns what was removed."""
    removed = []
    for folder in Path(tempfile.gettempdir()).glob("parbench-*-*-*"):
        owner = _owner_pid(folder.name)
        if owner is None or psutil.pid_exists(owner) or not _mine(folder):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def _owner_pid(name: str) -> int | None:
    for prefix in TEMP_PREFIXES:
        if name.startswith(prefix):
            pid = name[len(prefix):].split("-", 1)[0]
            return int(pid) if pid.isdigit() else None
    return None


def _mine(folder: Path) -> bool:
    try:
        return folder.is_dir() and not folder.is_symlink() and folder.stat().st_uid == os.getuid()
    except OSError:
        return False
