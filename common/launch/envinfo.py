"""The machine and software a run used, without importing a framework (the worker adds the
framework's own facts)."""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

from parbench.base.devices import cpu_count, cpu_model


def git_commit() -> str | None:
    """Commit of the parbench source tree, with '-dirty' when it has uncommitted changes."""
    source = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"],
                                capture_output=True, text=True, timeout=10, check=True)
        dirty = subprocess.run(["git", "-C", str(source), "status", "--porcelain", "--", "."],
                               capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None  # an installed wheel has no git checkout
    return commit.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def machine_env(threads_per_worker: int) -> dict:
    return {"python": sys.version.split()[0], "os": platform.platform(),
            "cpu_model": cpu_model(), "cores": cpu_count(),
            "threads_per_worker": threads_per_worker, "git_commit": git_commit()}
