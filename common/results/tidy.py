"""The report as one tidy CSV table: a row per cell (backend x devices x launcher x nodes x modes
of one spec), a column per variable, names a program can use (snake case, no units in the
name but the throughput's own column), numbers exact, an empty field where a figure does not
exist, so ``pandas.read_csv`` reads it without post-processing. Where a cell's repeats differ
in a fact (two commits, two framework versions) the field lists the values, ';'-separated."""

from __future__ import annotations

import csv
import io
import math

from parbench.run.modes import MODES
from parbench.run.registry import BACKENDS

from .noderows import node_scores
from .provenance import short_commit
from .rows import NO_DEVICE, Cell, Group, Row, throughput_column
from .scaling import threads_per_worker, total_threads

# the report's cells as the CSV names them; "{speed}" is the row's throughput column
FIGURES = {
    "status": "status", "ok_repeats": None, "repeats": None, "throughput": "{speed}",
    "throughput_low": "{speed} 95% low", "throughput_high": "{speed} 95% high",
    "throughput_min": "{speed} min", "throughput_max": "{speed} max",
    "ci_method": "CI method", "cv_percent": "cv %", "noisy": "noisy",
    "step_ms_p50": "step ms p50", "step_ms_low": "step ms 95% low",
    "step_ms_high": "step ms 95% high", "step_ms_p90": "step ms p90",
    "scaling_eff": "scaling eff.", "scaling_eff_low": "scaling eff. 95% low",
    "scaling_eff_high": "scaling eff. 95% high", "shared_cores": "shared cores",
    "vs_single_same_threads": "vs single same threads",
    "vs_single_same_threads_low": "vs single same threads 95% low",
    "vs_single_same_threads_high": "vs single same threads 95% high",
    "tflops": "TFLOP/s", "tflops_per_device": "TFLOP/s per device",
    "utilisation_percent": "util. %", "mfu_percent": "MFU %",
    "data_wait_percent": "data wait %", "startup_s": "startup s",
    "first_step_s": "first step s", "time_to_target_s": "time to target s",
    "peak_rss_mib": "peak RSS MiB", "rss_mib_per_rank": "RSS MiB per rank",
    "peak_device_mib": "peak device MiB", "device_mib_per_device": "device MiB per device",
}


def _facts(runs: list[dict], get) -> str:
    """The distinct values of a fact over a cell's repeats, in order, ';'-separated."""
    return ";".join(dict.fromkeys(str(get(r)) for r in runs))


def _modes(row: Row) -> dict[str, Cell]:
    """Each mode's value, empty where the mode does not apply to the row's backend."""
    backend = BACKENDS.get(row.backend)
    return {name: None if mode.cell(getattr(row.modes, name), backend) == "-"
            else getattr(row.modes, name) for name, mode in MODES.items()}


def _key_fields(group: Group, row: Row) -> dict[str, Cell]:
    runs = row.runs
    return {
        "spec_sha256": group.sha, "framework": row.framework,
        "framework_version": _facts(runs, lambda r: r["env"]["framework_version"]),
        "backend": row.backend, "launcher": row.launcher, "devices": row.devices,
        "nodes": row.nodes, "model": _facts(runs, lambda r: r["model"]),
        "task": group.task.name, "dataset": _facts(runs, lambda r: r["dataset"]),
        "global_batch": _facts(runs, lambda r: r["global_batch"]),
        "batch_mode": _facts(runs, lambda r: r["batch_mode"]),
        "steps": _facts(runs, lambda r: r["steps"]), "seed": _facts(runs, lambda r: r["seed"]),
        **_modes(row),
        "threads_per_worker": threads_per_worker(row), "total_threads": total_threads(row),
        "commit": _facts(runs, lambda r: short_commit(r["env"]["git_commit"])),
        "schema": _facts(runs, lambda r: r["schema_version"]),
        "cpu": _facts(runs, lambda r: r["env"]["cpu_model"]),
        "throughput_unit": throughput_column(row.task)}


def _figure_fields(row: Row) -> dict[str, Cell]:
    speed = throughput_column(row.task)
    ok = len(row.metrics)
    fields = {name: row.cells.get(cell.format(speed=speed)) if cell else None
              for name, cell in FIGURES.items()}
    for name in ("peak_device_mib", "device_mib_per_device"):  # a CPU run has no device memory
        fields[name] = None if fields[name] == NO_DEVICE else fields[name]
    fields.update(ok_repeats=ok, repeats=len(row.runs))
    fields.update({key: row.cells[column] for column, key in row.task.quality_columns.items()})
    scores = node_scores(row)
    fields["node_scoring_s"] = scores
    return fields


def _field(value: Cell | bool) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return ";".join(_field(v) for v in value)
    if isinstance(value, float):
        return "inf" if math.isinf(value) else repr(value)
    return str(value)


def to_csv(groups: list[Group]) -> str:
    """Every row of every spec (profiled and diverged runs have their own tables and are not
    here), one CSV table; columns in the order of the first row that has them."""
    rows = [{**_key_fields(g, row), **_figure_fields(row)} for g in groups for row in g.rows]
    columns = list(dict.fromkeys(name for row in rows for name in row))
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows({c: _field(row.get(c)) for c in columns} for row in rows)
    return out.getvalue()
