"""The machine and software a run used, without importing a framework (the worker adds the
framework's own facts)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from parbench.base.devices import cpu_count, cpu_model
from parbench.run.registry import FRAMEWORKS


def git_commit() -> str | None:
    """Commit of the parbench source tree, with '-dirty' when its code (the core and the
    frameworks' folders; not docs or tests) has uncommitted changes."""
    source = Path(__file__).resolve().parent
    code = [str(folder) for folder in (source.parent, source.parents[1] / "frameworks")
            if folder.is_dir()]
    try:
        commit = subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"],
                                capture_output=True, text=True, timeout=10, check=True)
        dirty = subprocess.run(["git", "-C", str(source), "status", "--porcelain", "--", *code],
                               capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None  # an installed wheel has no git checkout
    return commit.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


# Packages whose version changes results or speed besides the framework's own: read from the
# installed distributions, so nothing is imported (a framework's companion may be absent: None).
LIBRARIES = ("numpy", *(name for f in FRAMEWORKS.values() for name in f.companions))


def library_versions() -> dict[str, str | None]:
    versions = {}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def memory_gib() -> float | None:
    """The machine's physical memory (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        return None


def machine_env(threads_per_worker: int) -> dict:
    return {"python": sys.version.split()[0], "os": platform.platform(),
            "cpu_model": cpu_model(), "cores": cpu_count(), "memory_gib": memory_gib(),
            "threads_per_worker": threads_per_worker, "libraries": library_versions(),
            "git_commit": git_commit()}
