"""The report's Environment table: one row per distinct environment a backend x devices x
launcher ran in (machine, versions, threads, allocator, devices, commit, record schema), with
how many runs it holds."""

from __future__ import annotations

from collections import Counter

from .provenance import allocator, libraries, short_commit
from .rows import RUN_KEY, Cell, Group

COLUMNS = ("spec", *RUN_KEY, "runs", "python", "OS", "CPU", "cores", "memory GiB",
           "threads/worker", "allocator", "framework", "version", "libraries", "device names",
           "CUDA", "NCCL", "git commit", "schema")


def _cells(group: Group, row_cells: dict[str, Cell], r: dict) -> dict[str, Cell]:
    env = r["env"]
    names = ", ".join(f"{n}x {name}" for name, n in Counter(env["device_names"]).items())
    memory = env.get("memory_gib")
    return {"spec": group.sha[:10], **{k: row_cells[k] for k in RUN_KEY},
            "python": env["python"], "OS": env["os"], "CPU": env["cpu_model"],
            "cores": env["cores"], "memory GiB": None if memory is None else round(memory, 1),
            "threads/worker": env["threads_per_worker"], "allocator": allocator(r),
            "framework": r["framework"], "version": env["framework_version"],
            "libraries": libraries(r), "device names": names or None,
            "CUDA": env["cuda_version"], "NCCL": env["nccl_version"],
            "git commit": short_commit(env["git_commit"]), "schema": r["schema_version"]}


def environment_rows(groups: list[Group]) -> list[dict[str, Cell]]:
    """One row per distinct environment of a backend x devices x launcher, counting its runs."""
    rows: dict[tuple, dict[str, Cell]] = {}
    for group in groups:
        for row in group.all_rows:
            for r in row.runs:
                cells = _cells(group, row.cells, r)
                key = tuple(map(str, cells.values()))
                rows.setdefault(key, {**cells, "runs": 0})["runs"] += 1
    return list(rows.values())
