"""Which rank died first, and how: exit reports written by whoever is each rank's parent.

Only a process's parent learns how it ended (exit code or signal). When a rank is SIGKILLed,
its peers fail a moment later in a collective ("Connection reset by peer"), and those echoes are
all a launcher's log shows. So each rank's parent writes ``exits/rank<N>.json`` the moment it
sees the rank end, and the record's error starts with the earliest failure:

* ``python`` launcher: the harness itself (rank 0 is its child);
* ``tf-config``: parbench's own cluster supervisor;
* ``spawn`` (torch and Paddle): the spawning process, through ``watch_spawned``;
* ``torchrun`` / ``paddle-launch``: the launcher is the parent and says little, so
  ``parbench.worker`` forks once: the child trains, the parent waits, reports and exits the way
  the child did (``fork_watcher``), so the launcher sees the same exit code or signal.
"""

from __future__ import annotations

import json
import multiprocessing.connection
import os
import signal
import socket
import time
from functools import partial
from pathlib import Path

from .files import write_atomic
from .lifetime import die_with_parent

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
             signal.SIGUSR2)


def how(returncode: int) -> str:
    """'exit code 17' or 'killed by SIGKILL', from a Popen-style return code."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


def write_exit(workdir: Path, rank: int, pid: int, returncode: int) -> None:
    report = {"rank": rank, "pid": pid, "returncode": returncode, "time": time.time(),
              "host": socket.gethostname()}
    write_atomic(Path(workdir) / "exits" / f"rank{rank}.json", json.dumps(report).encode())


def _failures(workdir: Path) -> list[dict]:
    """The exit reports of the ranks that failed, earliest first."""
    reports = []
    for path in (Path(workdir) / "exits").glob("rank*.json"):
        try:
            reports.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return sorted((r for r in reports if r["returncode"] != 0), key=lambda r: r["time"])


def first_failure_time(workdir: Path) -> float | None:
    """When the first rank failed (time.time()), or None: how nodes order their failures."""
    failed = _failures(workdir)
    return failed[0]["time"] if failed else None


def first_failure(workdir: Path) -> str | None:
    """'rank 1 (pid 123 on host) died first: killed by SIGKILL', plus the exception it raised
    when it wrote one; None when no rank failed (or none was reported)."""
    failed = _failures(workdir)
    if not failed:
        return None
    first = failed[0]
    line = (f"rank {first['rank']} (pid {first['pid']} on {first['host']}) died first: "
            f"{how(first['returncode'])}")
    raised = _raised(Path(workdir), first["rank"])
    return f"{line}; it raised {raised}" if raised else line


def _raised(workdir: Path, rank: int) -> str | None:
    """The last line of the traceback that rank wrote (its exception and message)."""
    for path in sorted((workdir / "errors").glob(f"*-rank {rank}.txt")):
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
        if lines:
            return lines[-1].strip()
    return None


def fork_watcher(rank: int, workdir: Path) -> None:
    """Split this process in two: the child returns and runs the rank as usual (normal
    interpreter exit, tracebacks and atexit included); the parent waits for it, reports how
    it ended and then ends the same way, so the launcher sees the same exit code or signal.
    Signals sent to the parent (a launcher stopping its workers) are passed on to the child.
    Call it before any framework is imported: the parent stays a small single-threaded waiter."""
    pid = os.fork()
    if pid == 0:
        die_with_parent()
        return
    for signum in FORWARDED:
        signal.signal(signum, partial(_pass_on, pid))
    _, status = os.waitpid(pid, 0)
    returncode = os.waitstatus_to_exitcode(status)
    write_exit(workdir, rank, pid, returncode)
    exit_like(returncode)


def _pass_on(pid: int, signum: int, _frame) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass  # the child ended meanwhile; waitpid reports how


def exit_like(returncode: int) -> None:
    """End this process with ``returncode`` (Popen convention: -N is signal N)."""
    if returncode < 0:
        if -returncode not in (signal.SIGKILL, signal.SIGSTOP):  # these have no handler
            signal.signal(-returncode, signal.SIG_DFL)
        os.kill(os.getpid(), -returncode)
        time.sleep(1)  # a signal that does not kill by default ends below instead
    os._exit(returncode if returncode >= 0 else 128 - returncode)


def watch_spawned(processes: list, workdir: Path) -> None:
    """Report each spawned rank (``multiprocessing.Process``, index = rank) as it ends, until
    all ended or one failed; the framework's own ``join`` then stops the rest and raises."""
    waiting = {p.sentinel: rank for rank, p in enumerate(processes)}
    while waiting:
        for sentinel in multiprocessing.connection.wait(list(waiting)):
            rank = waiting.pop(sentinel)
            process = processes[rank]
            process.join()
            write_exit(workdir, rank, process.pid, process.exitcode)
            if process.exitcode != 0:
                return
