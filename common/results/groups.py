"""The report's groups: the records of one spec_sha256, one row per backend x devices x launcher
x nodes x modes in report order (rows.py computes each row's cells, scaling.py its scaling
against its references); profiled and diverged runs in rows of their own."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from parbench.run.modes import Modes, modes_of
from parbench.run.profiling import PHASES
from parbench.run.registry import BACKENDS

from .records import task_of_record
from .rows import (
    FRAMEWORKS,
    Cell,
    Group,
    Row,
    is_profiled,
    key_cells,
    median_of,
    nodes_of,
    row_cells,
    status_of,
)
from .scaling import scaling_cells
from .time_to_target import target_text


def _title(sha: str, records: list[dict]) -> str:
    """What the spec fixes; a field that differs within it (batch mode) shows its values."""
    def values(get: Callable[[dict], object], of: list[dict] = records) -> str:
        return "/".join(dict.fromkeys(str(get(r)) for r in of))

    steps = values(lambda r: r["steps"]) + " steps"
    aimed = [r for r in records if (r.get("metrics") or {}).get("target")]
    if aimed:  # a run stopped at its target: the steps it took, beside its budget
        budget = values(lambda r: f"{r['config']['steps']} steps" if r["config"].get("steps")
                        else f"{r['config'].get('epochs') or 2} epochs", aimed)
        steps += f" (stopped at {values(target_text, aimed)}; budget {budget})"
    return (f"spec {sha[:10]}: model {values(lambda r: r['model'])}, dataset "
            f"{values(lambda r: r['dataset'])}, global batch "
            f"{values(lambda r: r['global_batch'])} ({values(lambda r: r['batch_mode'])} batch "
            f"fixed), {steps}, lr {values(lambda r: r['lr'])}, seed "
            f"{values(lambda r: r['seed'])}")


def _order(key: tuple[str, str, int, str, int, Modes, int | None]) -> tuple:
    """Frameworks in registry order; within one, the single-node rows first, then multi-node
    ones by node count; then backends in registry order (an unknown one after the known ones,
    by name), devices, launcher, modes (the defaults first) and threads."""
    framework, backend, devices, launcher, nodes, modes, threads = key
    known = list(BACKENDS)
    return (FRAMEWORKS.index(framework) if framework in FRAMEWORKS else len(FRAMEWORKS),
            framework, nodes, known.index(backend) if backend in known else len(known),
            backend, devices, launcher, bool(modes.changed()), modes.label, threads or 0)


def _profile_cells(row: Row) -> dict[str, Cell]:
    """Medians over the ok repeats of the slowest rank's median phase times, and the first
    such repeat's top operations (ms per step)."""
    profiles = [r["profile"] for r in row.runs if r["status"] == "ok" and "profile" in r]
    top = profiles[0]["top_ops"] if profiles else []
    return {**key_cells(row),
            "status": status_of(row.runs), "runs": f"{len(profiles)}/{len(row.runs)}",
            **{f"{phase} ms": median_of(p["median_ms"][phase] for p in profiles)
               for phase in (*PHASES, "step")},
            "top ops (ms/step)": "; ".join(f"{op['name']} {op['self_ms_per_step']:.3g}"
                                           for op in top) or None}


def _diverged(record: dict) -> bool:
    """A run whose loss stopped being finite: it has no figures, only where it stopped."""
    return record["status"] == "diverged"


def _diverged_cells(row: Row) -> dict[str, Cell]:
    """Each repeat's step, rank and loss where training stopped, and the run's lr."""
    stops = [r["diverged"] for r in row.runs]
    return {**key_cells(row), "repeats": len(row.runs),
            "at step": [stop["step"] for stop in stops],
            "rank": [stop["rank"] for stop in stops], "loss": [stop["loss"] for stop in stops],
            "lr": row.runs[0]["lr"]}


def _rows(records: list[dict]) -> list[Row]:
    """One row per backend x devices x launcher x nodes x modes x threads per worker, in report
    order, repeats in order; a row whose configuration also ran with other threads says its
    own (``Row.show_threads``)."""
    keyed: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        keyed[(r["framework"], r["backend"], r["world_size"], r["launcher"], nodes_of(r),
               modes_of(r), r["env"].get("threads_per_worker"))].append(r)
    rows = [Row(*key[:-1], runs=sorted(keyed[key], key=lambda r: r["repeat"]),
                task=task_of_record(keyed[key][0]), threads=key[-1])
            for key in sorted(keyed, key=_order)]
    threads = defaultdict(set)
    for key in keyed:
        threads[key[:-1]].add(key[-1])
    for row in rows:
        row.show_threads = len(threads[row.key]) > 1
    return rows


def build_groups(records: list[dict]) -> list[Group]:
    """One group per spec_sha256, one row per backend x devices x launcher x nodes, grouped by
    framework, single first; profiled runs in rows of their own (``profiles``)."""
    by_spec: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        by_spec[r["spec_sha256"]].append(r)
    groups = []
    for sha in sorted(by_spec):
        rows = _rows([r for r in by_spec[sha] if not is_profiled(r) and not _diverged(r)])
        for row in rows:
            row.cells = row_cells(row)
        for row in rows:
            row.cells.update(scaling_cells(row, rows))
        profiles = _rows([r for r in by_spec[sha] if is_profiled(r)])
        for row in profiles:
            row.cells = _profile_cells(row)
        diverged = _rows([r for r in by_spec[sha] if _diverged(r) and not is_profiled(r)])
        for row in diverged:
            row.cells = _diverged_cells(row)
        group = Group(sha, "", task_of_record(by_spec[sha][0]), rows, profiles, diverged)
        group.title = _title(sha, [r for row in group.all_rows for r in row.runs])
        groups.append(group)
    return groups


