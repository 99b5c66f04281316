"""Every process of a run dies with the run, whatever ends it.

Launchers hide their workers from a process-group kill: torchrun and paddle.distributed.launch
start each worker in a session of its own. So parbench tracks the whole tree by pid instead:

* the harness is a *child subreaper* (``PR_SET_CHILD_SUBREAPER``): a worker whose launcher died
  is re-parented to the harness instead of to init, so it stays a descendant that ``psutil``
  finds and the harness can reap;
* every launcher and worker asks the kernel to SIGKILL it when its parent exits
  (``PR_SET_PDEATHSIG``, parbench.run.process.die_with_parent), which covers the one case the
  harness cannot handle itself: the harness being SIGKILLed;
* ``kill_tree`` SIGKILLs every descendant of the launcher seen during the run or found at the
  end, and every child of the harness born since the launch (orphans re-parented to it).

A per-run cgroup (``cgroup.kill``) would be the other way, but it needs a writable cgroup v2
hierarchy (root or a delegated subtree; this project's machines mount cgroup v1), while the two
prctl calls work unprivileged on any Linux since 3.4. Elsewhere they are no-ops and the psutil
sweep alone remains.

SIGTERM and SIGHUP (what ``kill``, systemd, Slurm's time limit and CI cancellation send) are
turned into the same exception as Ctrl-C, so the same ``finally`` blocks clean up.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psutil

from parbench.run.process import prctl

PR_SET_CHILD_SUBREAPER = 36
KILL_ROUNDS = 5  # a process forking while we kill can add a child; sweep until none is left
# A descendant scan reads every process in /proc: on a small machine that is CPU taken from the
# run being measured, so it is rare during the run (orphans come to the subreaper anyway).
REFRESH_S = 2.0


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, handled exactly like Ctrl-C; ``signum`` sets the exit code."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def become_subreaper() -> None:
    """Orphaned descendants are re-parented to this process (Linux; a no-op elsewhere)."""
    prctl(PR_SET_CHILD_SUBREAPER, 1)


# The signal that asked this process to stop, once one has (handle_termination).
_received: list[int] = []
_deferred: list[bool] = []  # while not empty, a stop is noted but not raised (stops_deferred)


def _stop_exception(signum: int) -> KeyboardInterrupt:
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)


def handle_termination() -> None:
    """Turn SIGTERM/SIGHUP into ``Terminated`` and keep SIGINT as KeyboardInterrupt; a second
    signal while the first is being cleaned up is ignored, so the cleanup itself finishes.
    A signal the caller ignores (a background job's SIGINT) stays ignored."""

    def handler(signum: int, _frame) -> None:
        if _received:
            return
        _received.append(signum)
        if not _deferred:
            raise _stop_exception(signum)

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, handler)


def raise_if_stopping() -> None:
    """Raise the stop exception again if a signal came and its exception got lost: Python
    prints and drops an exception raised while a ``__del__`` method or a finalizer runs (the
    garbage collector can run them between any two bytecodes), and the handler ignores later
    signals, so without this check a loop would run to its end after a Ctrl-C."""
    if _received:
        raise _stop_exception(_received[0])


@contextmanager
def stops_deferred() -> Iterator[None]:
    """Within it, a stop signal is noted (``stop_signal``) instead of raised: the caller ends
    what it runs in its own way first (a checkpointing run writes its last checkpoint)."""
    _deferred.append(True)
    try:
        yield
    finally:
        _deferred.pop()


def stop_signal() -> int | None:
    """The signal that asked this process to stop, or None."""
    return _received[0] if _received else None


def raise_stop() -> None:
    """Raise the stop exception of the signal that came (within stops_deferred too)."""
    raise _stop_exception(_received[0])


class ProcessTree:
    """The processes of one run: the launcher and everything it started, tracked by pid."""

    def __init__(self, launcher_pid: int):
        self.started = time.time()
        self.launcher = psutil.Process(launcher_pid)
        self.seen: dict[int, psutil.Process] = {launcher_pid: self.launcher}
        self.refreshed = 0.0

    def refresh(self, force: bool = False) -> None:
        """Remember the launcher's descendants (at most every REFRESH_S unless forced): one may
        later be orphaned and re-parented."""
        now = time.monotonic()
        if not force and now - self.refreshed < REFRESH_S:
            return
        self.refreshed = now
        try:
            for process in self.launcher.children(recursive=True):
                self.seen.setdefault(process.pid, process)
        except psutil.NoSuchProcess:
            pass

    def _candidates(self) -> list[psutil.Process]:
        """Every process seen under the launcher, and every child of ours born since the launch
        (an orphaned worker re-parented to us)."""
        self.refresh(force=True)
        candidates = dict(self.seen)
        for child in psutil.Process().children(recursive=True):
            try:
                if child.create_time() >= self.started - 1:
                    candidates.setdefault(child.pid, child)
            except psutil.NoSuchProcess:
                pass
        return list(candidates.values())

    def kill(self) -> None:
        """SIGKILL every process of the run and reap the ones that became ours; returns once
        none is left. The launcher itself is left to its Popen to reap."""
        for _ in range(KILL_ROUNDS):
            processes = [p for p in self._candidates() if _running(p)]
            if not processes:
                break
            for process in processes:
                try:
                    process.kill()  # psutil refuses a pid that was reused meanwhile
                except psutil.NoSuchProcess:
                    pass
            psutil.wait_procs(processes, timeout=10)
        self._reap_orphans()

    def _reap_orphans(self) -> None:
        mine = {p.pid for p in psutil.Process().children()}
        for process in self._candidates():
            if process.pid in mine and process.pid != self.launcher.pid:
                try:
                    process.wait(timeout=0)  # a zombie orphan: collect its exit status
                except (psutil.NoSuchProcess, psutil.TimeoutExpired, ChildProcessError):
                    pass


def _running(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


