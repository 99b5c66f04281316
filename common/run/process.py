"""A worker process's own end: it dies with its parent, it exits without interpreter
finalization once its work is written, and whoever is a rank's parent reports how that rank
ended.

Only a process's parent learns how it ended (exit code or signal). When a rank is SIGKILLed,
its peers fail a moment later in a collective ("Connection reset by peer"), and those echoes are
all a launcher's log shows. So each rank's parent writes ``exits/rank<N>.json`` the moment it
sees the rank end (``write_exit``), and the harness's record starts with the earliest failure
(parbench.launch.exits reads them):

* ``python`` launcher: the harness itself (rank 0 is its child);
* ``tf-config``: parbench's own cluster supervisor;
* ``spawn`` (torch and Paddle): the spawning process, through ``watch_spawned``;
* ``torchrun`` / ``paddle-launch``: the launcher is the parent and says little, so
  ``parbench.run.worker`` forks once: the child trains, the parent waits, reports and exits the
  way the child did (``fork_watcher``), so the launcher sees the same exit code or signal.
"""

from __future__ import annotations

import ctypes
import json
import multiprocessing.connection
import os
import signal
import socket
import sys
import time
from functools import partial
from pathlib import Path

from parbench.base.files import write_atomic

PR_SET_PDEATHSIG = 1


def exit_finished() -> None:
    """End a worker whose work is done and written, skipping interpreter finalization: there,
    C++ objects of the collectives (gloo's worker threads) are destroyed after Python's own
    teardown, and a torch-ddp rank was killed by SIGABRT there after finishing its run ('terminate
    called without an active exception'; seen twice, rare; pytorch#179291 describes the same
    crash), which failed a run whose results were complete."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def prctl(option: int, value: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(option, value, 0, 0, 0) == 0


def die_with_parent(expected_parent: int | None = None) -> None:
    """Ask the kernel to SIGKILL this process when its parent exits.

    The request only covers a parent alive at the time it is made, so a parent that is already
    gone (the pid changed) ends this process at once. Safe in a ``preexec_fn``.
    """
    parent = os.getppid() if expected_parent is None else expected_parent
    if prctl(PR_SET_PDEATHSIG, signal.SIGKILL) and os.getppid() != parent:
        os._exit(128 + signal.SIGKILL)


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


def write_exit(workdir: Path, rank: int, pid: int, returncode: int,
               seen: float | None = None) -> None:
    """``rank``'s end, seen at ``seen`` (time.time(); default now)."""
    report = {"rank": rank, "pid": pid, "returncode": returncode,
              "time": time.time() if seen is None else seen, "host": socket.gethostname()}
    write_atomic(Path(workdir) / "exits" / f"rank{rank}.json", json.dumps(report).encode())


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
    all ended or one failed; the framework's own ``join`` then stops the rest and raises. The
    ranks one wake-up finds ended are reported at one time: the order they are listed in says
    nothing of which ended first (parbench.launch.exits orders them)."""
    waiting = {p.sentinel: rank for rank, p in enumerate(processes)}
    while waiting:
        ended = [waiting.pop(s) for s in multiprocessing.connection.wait(list(waiting))]
        seen = time.time()
        for rank in ended:
            processes[rank].join()
            write_exit(workdir, rank, processes[rank].pid, processes[rank].exitcode, seen)
        if any(processes[rank].exitcode != 0 for rank in ended):
            return
