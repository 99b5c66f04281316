"""Which rank died first, and how, read from the exit reports each rank's parent wrote
(parbench.run.process explains who writes them): the record's error starts with the earliest
failure, and nodes order their failures by its time."""

from __future__ import annotations

import json
import math
import signal
from pathlib import Path

from parbench.run.process import how

# Deaths no peer's failure causes: a rank that ended so failed first among those seen together
CAUSES = {-signal.SIGKILL, -signal.SIGSEGV, -signal.SIGBUS, -signal.SIGILL, -signal.SIGFPE}


def _failures(workdir: Path) -> list[dict]:
    """The exit reports of the ranks that failed, earliest first. Ranks seen to end together
    (one report time: parbench.run.process.watch_spawned) are ordered by how each ended: a
    death no peer causes (killed, a crash) first, then the ranks that raised, by when each
    wrote its traceback, then the rest (SIGABRT: a collective library aborting on a lost peer;
    SIGTERM: a launcher stopping the others). A rank that raised tears down its collectives as
    it exits, and a peer that aborts on the lost connection can end in the same instant."""
    reports = []
    for path in (Path(workdir) / "exits").glob("rank*.json"):
        try:
            reports.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    failed = [r for r in reports if r["returncode"] != 0]
    return sorted(failed, key=lambda r: (r["time"], *_how_it_failed(Path(workdir), r)))


def _how_it_failed(workdir: Path, report: dict) -> tuple[int, float]:
    """(0 for a death no peer causes, 1 for a rank that raised, 2 otherwise; when it raised)."""
    raised = min((float(path.name.split("-", 1)[0]) for path in
                  (workdir / "errors").glob(f"*-rank {report['rank']}.txt")), default=math.inf)
    if report["returncode"] in CAUSES:
        return 0, raised
    return (1 if raised < math.inf else 2), raised


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


