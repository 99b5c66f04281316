"""The report's Environment table: one row per distinct environment a backend x devices x
launcher ran in (versions, CPU, threads, devices, commit), with how many runs it holds."""

from __future__ import annotations

from collections import Counter

from .rows import RUN_KEY, Cell, Group


def _short(commit: str | None) -> str | None:
    """A commit as 10 hex digits, keeping a '-dirty' suffix (like the spec's 10)."""
    return commit and commit[:10] + commit[40:]


def environment_rows(groups: list[Group]) -> list[dict[str, Cell]]:
    """One row per distinct environment of a backend x devices x launcher, counting its runs."""
    rows: dict[tuple, dict[str, Cell]] = {}
    for group in groups:
        for row in group.all_rows:
            for r in row.runs:
                env = r["env"]
                names = ", ".join(f"{n}x {name}" for name, n in Counter(env["device_names"])
                                  .items()) or None
                cells = {"spec": group.sha[:10], **{k: row.cells[k] for k in RUN_KEY},
                         "python": env["python"], "OS": env["os"], "CPU": env["cpu_model"],
                         "cores": env["cores"], "threads/worker": env["threads_per_worker"],
                         "framework": r["framework"], "version": env["framework_version"],
                         "device names": names, "CUDA": env["cuda_version"],
                         "NCCL": env["nccl_version"], "git commit": _short(env["git_commit"])}
                key = tuple(map(str, cells.values()))
                rows.setdefault(key, {**cells, "runs": 0})["runs"] += 1
    return list(rows.values())
