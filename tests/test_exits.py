"""The exit reports behind "rank N died first": the watcher parbench.run.worker forks in front of
a rank under torchrun and paddle.distributed.launch ends exactly as the rank did, so the
launcher sees the same exit code or signal, and the report says it first. And how a rank ends
its strategy (parbench.loop.run_worker): a failure is written first, then torn down as failed,
so no failed rank runs a collective release."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from parbench.launch.exits import first_failure
from parbench.run.process import how, write_exit

WATCHED = """
import os, signal, sys
from pathlib import Path
from parbench.run.process import fork_watcher
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


def _raised(workdir, rank: int, message: str) -> None:
    from types import SimpleNamespace

    from parbench.run.job import write_error

    try:
        raise RuntimeError(message)
    except RuntimeError:
        write_error(SimpleNamespace(path=workdir), f"rank {rank}")


def test_ranks_seen_ending_together_are_ordered_by_their_tracebacks(tmp_path):
    """As CI once saw under paddle-spawn: rank 1 raised, its exit closed its sockets and rank 0
    aborted on the lost connection; the spawn watcher found both ended at one wake-up."""
    _raised(tmp_path, 1, "injected fault on rank 1 at step 2")
    write_exit(tmp_path, 0, 100, -signal.SIGABRT, seen=50.0)
    write_exit(tmp_path, 1, 101, 1, seen=50.0)
    assert first_failure(tmp_path).startswith("rank 1 (pid 101 on ")
    assert first_failure(tmp_path).endswith(
        "died first: exit code 1; it raised RuntimeError: injected fault on rank 1 at step 2")


def test_a_killed_rank_seen_with_an_echo_comes_first(tmp_path):
    """torch-ddp under spawn: rank 1 SIGKILLed, rank 0 raised on the lost connection and ended
    before the watcher woke; one wake-up found both."""
    _raised(tmp_path, 0, "Connection closed by peer")
    write_exit(tmp_path, 0, 100, 1, seen=50.0)
    write_exit(tmp_path, 1, 101, -signal.SIGKILL, seen=50.0)
    assert first_failure(tmp_path).startswith("rank 1 (pid 101 on ")


def test_an_echo_raised_before_the_killed_rank_was_reported_does_not_come_first(tmp_path):
    """As CI once saw under torchrun: rank 1 SIGKILLed, rank 0 raised on the closed connection
    before rank 1's watcher had written its report; rank 0 ended later (torchrun's SIGTERM)."""
    _raised(tmp_path, 0, "Connection closed by peer")
    write_exit(tmp_path, 1, 101, -signal.SIGKILL)
    write_exit(tmp_path, 0, 100, -signal.SIGTERM)
    assert first_failure(tmp_path).startswith("rank 1 (pid 101 on ")
    assert first_failure(tmp_path).endswith("died first: killed by SIGKILL")


def test_no_failure_when_every_rank_exited_zero(tmp_path):
    write_exit(tmp_path, 0, 100, 0)
    assert first_failure(tmp_path) is None


class Recorder:
    """A strategy that records its teardowns and whether the rank's error was written first."""

    rank = 1

    def __init__(self, job):
        self.job, self.teardowns = job, []

    def teardown(self, failed: bool) -> None:
        written = sorted(p.name for p in (self.job.path / "errors").glob("*.txt"))
        self.teardowns.append((failed, written))


def _run(tmp_path, train, build=Recorder):
    from types import SimpleNamespace

    from parbench.run.loop import run_worker

    built = []

    def recorded(job):
        built.append(build(job))
        return built[-1]

    job = SimpleNamespace(path=tmp_path, export_portable=False)
    try:
        return run_worker(job, recorded, train=train), built
    except BaseException as error:  # noqa: BLE001 (what run_worker re-raised)
        return error, built


def test_a_finished_rank_tears_down_as_finished(tmp_path):
    log, (strategy,) = _run(tmp_path, train=lambda strategy: "the rank log")
    assert log == "the rank log" and strategy.teardowns == [(False, [])]


@pytest.mark.parametrize("error", [RuntimeError("boom"), KeyboardInterrupt()])
def test_a_failed_rank_writes_its_error_then_tears_down_as_failed(tmp_path, error):
    def fail(strategy):
        raise error

    raised, (strategy,) = _run(tmp_path, train=fail)
    assert raised is error
    ((failed, written),) = strategy.teardowns  # once, without a collective release
    assert failed and len(written) == 1 and written[0].endswith("-rank 1.txt")


def test_a_strategy_that_fails_to_build_has_nothing_to_tear_down(tmp_path):
    def broken(job):
        raise RuntimeError("no device")

    raised, built = _run(tmp_path, train=None, build=broken)
    assert isinstance(raised, RuntimeError) and built == []
    (written,) = (tmp_path / "errors").glob("*.txt")
    assert "RuntimeError: no device" in written.read_text()
