"""Which paths git ignores: a user's own results (results/runs) are not the project's, so the
generated docs and their checks leave them out."""

from __future__ import annotations

import subprocess
from pathlib import Path


def git_ignored(paths: list[Path]) -> set[Path]:
    """Those of ``paths`` git ignores; none outside a git work tree (git answers 128)."""
    if not paths:
        return set()
    answer = subprocess.run(["git", "check-ignore", "--stdin", "-z"],
                            cwd=paths[0].absolute().parent, capture_output=True, text=True,
                            input="\0".join(str(p.absolute()) for p in paths))
    if answer.returncode not in (0, 1):  # 1: none ignored
        return set()
    return {Path(name) for name in answer.stdout.split("\0") if name}
