"""A record's commit says '-dirty' when the code that ran (the core or a framework's folder)
differs from it, and not for an edit to the docs or tests, which change no figure."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import parbench.launch.envinfo as envinfo


def git(folder: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True)


def test_a_change_to_any_code_folder_marks_the_commit_dirty(tmp_path):
    repo = tmp_path / "repo"
    module = repo / "common" / "launch" / "envinfo.py"
    module.parent.mkdir(parents=True)
    shutil.copy(envinfo.__file__, module)
    for path in ("common/contract/spec.py", "frameworks/jax/model.py", "docs/usage.md"):
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text("# v1\n")
    (repo / ".gitignore").write_text("__pycache__/\n")  # importing the copy writes bytecode
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "v1")
    spec = importlib.util.spec_from_file_location("copied_envinfo", module)
    copied = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(copied)

    assert not copied.git_commit().endswith("-dirty")
    (repo / "docs/usage.md").write_text("# v2\n")
    assert not copied.git_commit().endswith("-dirty")  # docs change no figure
    for path in ("frameworks/jax/model.py", "common/contract/spec.py"):
        (repo / path).write_text("# v2\n")
        assert copied.git_commit().endswith("-dirty"), path
        git(repo, "checkout", "--", path)
