"""The exit reports behind "rank N died first": the watcher parbench.worker forks in front of
a rank under torchrun and paddle.distributed.launch ends exactly as the rank did, so the
launcher sees the same exit code or signal, and the report says it first."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from parbench.exits import first_failure, how, write_exit

WATCHED = """
import os, signal, sys
from pathlib import Path
from parbench.exits import fork_watcher
fork_watcher(3, Path(sys.argv[1]))  # from here on, this is the rank (the watcher's child)
{body}
"""


@pytest.mark.parametrize("body,returncode", [
    ("os.kill(os.getpid(), signal.SIGKILL)", -signal.SIGKILL),
    ("os.kill(os.getpid(), signal.SIGTERM)", -signal.SIGTERM),
    ("raise SystemExit(5)", 5),
    ("raise RuntimeError('boom')", 1),
    ("pass", 0),
])
def test_watcher_ends_like_its_rank_and_reports_it(tmp_path, body, returncode):
    done = subprocess.run([sys.executable, "-c", WATCHED.format(body=body), str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == returncode, done.stderr
    report = json.loads((tmp_path / "exits" / "rank3.json").read_text())
    assert report["rank"] == 3 and report["returncode"] == returncode
    if body.startswith("raise RuntimeError"):
        assert "RuntimeError: boom" in done.stderr  # the rank's traceback is not swallowed


def test_first_failure_is_the_earliest_nonzero_report(tmp_path):
    write_exit(tmp_path, 0, 100, 0)
    write_exit(tmp_path, 1, 101, -signal.SIGKILL)
    write_exit(tmp_path, 2, 102, 1)  # an echo: fails after rank 1, in a collective
    assert first_failure(tmp_path).startswith("rank 1 (pid 101 on ")
    assert first_failure(tmp_path).endswith("died first: killed by SIGKILL")
    assert how(17) == "exit code 17" and how(-signal.SIGTERM) == "killed by SIGTERM"


def test_no_failure_when_every_rank_exited_zero(tmp_path):
    write_exit(tmp_path, 0, 100, 0)
    assert first_failure(tmp_path) is None
