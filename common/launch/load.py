"""How busy the machine was around a run: the load average before and after, and the CPU time
that processes outside the run used meanwhile (the record's ``env.load_1m_start``,
``load_1m_end``, ``other_cpu_s``). A speed figure measured beside another job is not a figure
about the framework; the report marks such cells."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class LoadSample:
    """The machine's load at one moment: taken just before a launch and right after the run,
    for the record's ``env.load_1m_start``, ``load_1m_end`` and ``other_cpu_s``."""

    load_1m: float  # 1-minute load average: runnable threads of the whole machine, lagging
    busy_cpu_s: float | None  # CPU time the cores we may use spent in processes since boot
    ours_cpu_s: float  # CPU time of this process and of every descendant it has reaped

    @classmethod
    def now(cls) -> LoadSample:
        times = os.times()
        return cls(os.getloadavg()[0], _busy_cpu_s(),
                   times.user + times.system + times.children_user + times.children_system)


def _busy_cpu_s() -> float | None:
    """user + nice + system time of the cores this process may use, from /proc/stat's per-CPU
    lines (Linux; None elsewhere). Only those cores: a container's /proc/stat lists the host's,
    and a process on a core the run cannot use does not compete with it for a core."""
    try:
        lines = Path("/proc/stat").read_text().splitlines()
    except OSError:
        return None
    mine = {f"cpu{n}" for n in os.sched_getaffinity(0)}
    ticks = sum(int(value) for line in lines if line.split(" ", 1)[0] in mine
                for value in line.split()[1:4])
    return ticks / os.sysconf("SC_CLK_TCK")


def load_env(before: LoadSample, after: LoadSample) -> dict:
    """The record's load fields. ``other_cpu_s``: CPU seconds that processes outside the run
    used during it on the cores it may use = growth of those cores' busy time minus growth of
    ours (this harness and its reaped descendants).

    Why our own children times measure the run: ``after`` is taken once every process of the
    run is dead and reaped (``_supervise`` ends with ``ProcessTree.kill``), and the kernel adds
    a reaped process's CPU time, with that of the descendants it reaped, to its parent's
    children times -- and so up to the harness, whose child the launcher is and which, as
    subreaper, adopts and reaps orphaned workers. psutil (ProcessTree) sees only processes
    still alive, and by then none is.

    Limits: null without /proc/stat; /proc/stat counts whole clock ticks while process times
    are measured, so a small difference is accounting noise (a negative one is clamped to 0);
    a descendant left a zombie that nobody reaped counts as another process's time; run time on
    a core outside our affinity (a worker that widened its own) makes the figure low."""
    other = None
    if before.busy_cpu_s is not None and after.busy_cpu_s is not None:
        other = max(0.0, (after.busy_cpu_s - before.busy_cpu_s)
                    - (after.ours_cpu_s - before.ours_cpu_s))
    return {"load_1m_start": round(before.load_1m, 2), "load_1m_end": round(after.load_1m, 2),
            "other_cpu_s": None if other is None else round(other, 2)}
