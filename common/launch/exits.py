"""Which rank died first, and how, read from the exit reports each rank's parent wrote
(parbench.run.process explains who writes them): the record's error starts with the earliest
failure, and nodes order their failures by its time."""

from __future__ import annotations

import json
from pathlib import Path

from parbench.run.process import how


def _failures(workdir: Path) -> list[dict]:
    """The exit reports of the ranks that failed, earliest failure first. A rank that raised
    failed when it wrote its traceback, not when it exited: its teardown closes its sockets
    first, and a peer that aborts on the lost connection can exit before it does."""
    reports = []
    for path in (Path(workdir) / "exits").glob("rank*.json"):
        try:
            reports.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    failed = [r for r in reports if r["returncode"] != 0]
    for report in failed:
        report["time"] = min([report["time"], *_raised_at(Path(workdir), report["rank"])])
    return sorted(failed, key=lambda r: r["time"])


def _raised_at(workdir: Path, rank: int) -> list[float]:
    """When that rank wrote its tracebacks (parbench.run.job.write_error names them by time)."""
    return [float(path.name.split("-", 1)[0])
            for path in (workdir / "errors").glob(f"*-rank {rank}.txt")]


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


