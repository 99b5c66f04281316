"""The report's rows: the repeats of one backend x devices x launcher x nodes x modes within one
spec, and each row's cells (medians over repeats, spread, 95% intervals, cv % and noise,
memory, the task's quality columns). groups.py groups the records into rows, scaling.py adds
each row's scaling, noderows.py splits a multi-node row by node, envrows.py lists the
environments; report.py lays them out as tables; headline.py picks the headline's rows;
plots.py draws them."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from parbench.contract.tasks import Task
from parbench.run.modes import MODES, Modes
from parbench.run.registry import BACKENDS

from .intervals import Interval, step_interval, throughput_interval
from .records import run_was_busy

Cell = str | int | float | list[float] | None

# A row never mixes two modes: each mode is a column of the row's key.
MODE_COLUMNS = tuple(mode.column for mode in MODES.values())
RUN_KEY = ("backend", "devices", "launcher")
KEY = (*RUN_KEY, *MODE_COLUMNS)
NO_DEVICE = "n/a (CPU)"
NOISY_CV_PERCENT = 5.0
# Report order: frameworks, and backends within one, as the registry lists them (single first).
FRAMEWORKS = tuple(dict.fromkeys(b.framework for b in BACKENDS.values()))


def median_of(values: Iterable[float | None]) -> float | None:
    """The median of the values present (None where none is)."""
    present = [v for v in values if v is not None]
    return float(np.median(present)) if present else None


def _per_position_median(lists: list[list[float]]) -> list[float]:
    """Median of each position (rank, device, step) over repeats; a shorter list simply has no
    say in the positions it lacks."""
    padded = np.full((len(lists), max(map(len, lists))), np.nan)
    for i, values in enumerate(lists):
        padded[i, :len(values)] = values
    return [float(v) for v in np.nanmedian(padded, axis=0)]


def throughput_column(task: type[Task]) -> str:
    """The column of a task's throughput: its unit per second ('samples/s')."""
    return f"{task.unit}/s"


def nodes_of(record: dict) -> int:
    """The nodes a record's run spanned; one written before schema 5 ran on one node."""
    return record.get("nnodes", 1)


def mode_cells(modes: Modes, backend: str) -> dict[str, Cell]:
    """The modes' cells of a row of ``backend`` ("-" where a mode does not apply to it)."""
    return {mode.column: mode.cell(getattr(modes, name), BACKENDS.get(backend))
            for name, mode in MODES.items()}


@dataclass
class Row:
    """The repeats of one backend x devices x launcher x nodes x modes within one spec."""

    framework: str
    backend: str
    devices: int  # over all nodes (world_size): what scaling efficiency divides by
    launcher: str
    nodes: int
    modes: Modes
    runs: list[dict]
    task: type[Task]
    threads: int | None = None  # per worker (env.threads_per_worker)
    show_threads: bool = False  # the same configuration also ran with other threads
    cells: dict[str, Cell] = field(default_factory=dict)
    speed_ci: Interval | None = None  # 95% interval of the throughput
    step_ci: Interval | None = None  # 95% interval of the median step time

    @property
    def metrics(self) -> list[dict]:
        return [r["metrics"] for r in self.runs if r["status"] == "ok"]

    @property
    def throughput(self) -> float | None:
        """The median throughput cell (samples/s, or the task's unit per second)."""
        return self.cells[throughput_column(self.task)]

    @property
    def devices_cell(self) -> Cell:
        """The devices column: the count on one node; nodes x devices per node (2x1) on
        several, so a 2-node row never reads like a 1-node row of as many devices."""
        return f"{self.nodes}x{self.devices // self.nodes}" if self.nodes > 1 else self.devices

    @property
    def key(self) -> tuple:
        """What a row is, but its threads."""
        return (self.framework, self.backend, self.devices, self.launcher, self.nodes,
                self.modes)

    @property
    def default_threads(self) -> bool:
        """Whether its workers had the threads a run gets without --threads: the cores over
        the processes on a node (one process drives every device of a one-process backend)."""
        backend = BACKENDS.get(self.backend)
        cores = {r["env"].get("cores") for r in self.runs}
        if backend is None or len(cores) != 1 or None in cores:
            return True  # cannot tell: no preference
        processes = 1 if backend.one_process else self.devices // self.nodes
        return self.threads == max(1, cores.pop() // processes)

    @property
    def backend_cell(self) -> str:
        """The backend, and its threads per worker where the same configuration also ran with
        other threads ('torch-single (1 thread)')."""
        if not self.show_threads:
            return self.backend
        return f"{self.backend} ({self.threads} thread{'s' if self.threads != 1 else ''})"

    @property
    def _approach(self) -> str:
        """The backend (with its threads where they tell two rows apart), its launcher where
        the backend has a choice of launchers, and its modes where they are not the
        defaults."""
        backend = BACKENDS.get(self.backend)
        launcher = f" [{self.launcher}]" if backend and len(backend.launchers) > 1 else ""
        modes = f" {self.modes.label}" if self.modes.changed() else ""
        return f"{self.backend_cell}{launcher}{modes}"

    @property
    def _on_nodes(self) -> str:
        return f" on {self.nodes} nodes" if self.nodes > 1 else ""

    @property
    def series(self) -> str:
        """The approach and, beyond one node, the node count: what a plot draws as one
        series (its device counts side by side)."""
        return f"{self._approach}{self._on_nodes}"

    @property
    def label(self) -> str:
        return f"{self._approach} x{self.devices}{self._on_nodes}"

    def median(self, get: Callable[[dict], float | None]) -> float | None:
        return median_of(get(m) for m in self.metrics)

    def per_position(self, get: Callable[[dict], list[float] | None]) -> list[float] | None:
        lists = [values for values in map(get, self.metrics) if values]
        return _per_position_median(lists) if lists else None


@dataclass
class Group:
    """Runs of one spec_sha256: only these are ever compared with each other."""

    sha: str
    title: str
    task: type[Task]  # every run of a spec trains the same model, so learns the same task
    rows: list[Row]  # plain runs that did not diverge
    profiles: list[Row] = field(default_factory=list)  # --profile runs: profile cells only
    diverged: list[Row] = field(default_factory=list)  # runs whose loss stopped being finite

    @property
    def all_rows(self) -> list[Row]:
        return [*self.rows, *self.profiles, *self.diverged]


def status_of(runs: list[dict]) -> str:
    reasons = [f"{r['status']}: {(r['error'] or '?').splitlines()[0]}"
               for r in runs if r["status"] != "ok"]
    return "; ".join(dict.fromkeys(reasons)) or "ok"


def _cv_percent(throughput: list[float]) -> float | None:
    if len(throughput) < 2:
        return None
    return float(np.std(throughput, ddof=1) / np.mean(throughput) * 100)


def _busy(run: dict) -> bool:
    """Whether other processes competed with the run; a record that cannot tell: unknown."""
    return bool(run_was_busy(run))


def _noisy(cv: float | None, runs: list[dict]) -> str:
    reasons = [name for name, hit in (("cv", cv is not None and cv > NOISY_CV_PERCENT),
                                      ("load", any(map(_busy, runs)))) if hit]
    return "+".join(reasons) or "no"


def _time_to_target(row: Row) -> float | None:
    """The median time to target, a run that never reached it counted as infinitely slow
    (the time-to-target table says how many did); None where no run had a target (records
    before schema 12 name it target_accuracy)."""
    if not any(m.get("target") or m.get("target_accuracy") is not None for m in row.metrics):
        return None
    return row.median(lambda m: math.inf if m["time_to_target_s"] is None
                      else m["time_to_target_s"])


def key_cells(row: Row) -> dict[str, Cell]:
    return {"backend": row.backend_cell, "devices": row.devices_cell, "launcher": row.launcher,
            **mode_cells(row.modes, row.backend)}


def _interval_cells(row: Row) -> dict[str, Cell]:
    """The 95% intervals of the row's speed and step time (kept on the row for the headline),
    and how they were made."""
    row.speed_ci, row.step_ci = throughput_interval(row.metrics), step_interval(row.metrics)
    speed = throughput_column(row.task)
    return {f"{speed} 95% low": row.speed_ci and row.speed_ci.low,
            f"{speed} 95% high": row.speed_ci and row.speed_ci.high,
            f"{speed} 95% CI": row.speed_ci and row.speed_ci.text(),
            "step ms 95% CI": row.step_ci and row.step_ci.text(),
            "step ms 95% low": row.step_ci and row.step_ci.low,
            "step ms 95% high": row.step_ci and row.step_ci.high,
            "CI method": row.speed_ci.method if row.speed_ci else None}


def row_cells(row: Row) -> dict[str, Cell]:
    throughput = [m["throughput"] for m in row.metrics]
    devices = row.per_position(lambda m: m["peak_device_mb"])
    no_device = NO_DEVICE if row.metrics else None
    cv = _cv_percent(throughput)
    speed = throughput_column(row.task)
    return {
        **key_cells(row),
        "status": status_of(row.runs), "runs": f"{len(throughput)}/{len(row.runs)}",
        speed: median_of(throughput), f"{speed} min": min(throughput, default=None),
        f"{speed} max": max(throughput, default=None),
        f"{speed} per device": _per_device(median_of(throughput), row.devices), "cv %": cv,
        "noisy": _noisy(cv, row.runs), **_interval_cells(row),
        "step ms p50": row.median(lambda m: m["step_time_ms"]["median"]),
        "step ms p90": row.median(lambda m: m["step_time_ms"]["p90"]),
        "data wait %": row.median(_wait_percent),
        **_flops_cells(row), **_cpu_cells(row),
        "startup s": row.median(lambda m: m["startup_s"]),
        "first step s": row.median(lambda m: m["first_step_s"]),
        **{column: row.median(lambda m, key=key: m.get(key))
           for column, key in row.task.quality_columns.items()},
        "time to target s": _time_to_target(row),
        "peak RSS MiB": row.median(lambda m: max(m["peak_rss_mb"])),
        "RSS MiB per rank": row.per_position(lambda m: m["peak_rss_mb"]),
        "peak device MiB": row.median(lambda m: max(m["peak_device_mb"] or [], default=None))
        if devices else no_device,
        "device MiB per device": devices or no_device,
    }


# metrics.flops (schema 9): model FLOP/s achieved and its share of the peaks, in per cent
FLOPS_COLUMNS = {"TFLOP/s": ("achieved_tflops", 1), "TFLOP/s per device":
                 ("achieved_tflops_per_device", 1), "util. %": ("utilisation", 100),
                 "MFU %": ("mfu", 100)}
CPU_COLUMNS = ("CPU ms/step per rank", "CPU busy %")


def _flops_cells(row: Row) -> dict[str, Cell]:
    def get(key: str, scale: float) -> Callable[[dict], float | None]:
        def value(metrics: dict) -> float | None:
            figure = (metrics.get("flops") or {}).get(key)
            return None if figure is None else scale * figure
        return value

    cells = {column: row.median(get(*field)) for column, field in FLOPS_COLUMNS.items()}
    # before schema 11 (no flops.peak_threads) utilisation was a device's share of one
    # worker's peak, which a one-process and a multi-process run of the same cores could not
    # share: only the whole run's is shown
    if any("peak_threads" not in (m.get("flops") or {}) for m in row.metrics):
        cells["util. %"] = None
    return cells


def _cpu_ms(metrics: dict) -> float | None:
    """A run's CPU milliseconds per steady step per rank (user + system, the ranks' mean)."""
    cpu = metrics.get("cpu_ms_per_step")
    if not cpu:
        return None
    return float(np.mean(np.add(cpu["user"], cpu["system"])))


def _cpu_cells(row: Row) -> dict[str, Cell]:
    """CPU per step beside the wall time: CPU busy % = a rank's CPU time over what its
    threads could spend in a step (threads x the wall step time); 100 is every thread busy the
    whole step, well above it is threads beyond those asked for, well below is waiting."""
    cpu = row.median(_cpu_ms)
    threads = {r["env"]["threads_per_worker"] for r in row.runs}
    wall = row.median(lambda m: m["step_time_ms"]["median"])
    busy = None if cpu is None or len(threads) != 1 or not wall else (
        100 * cpu / (threads.pop() * wall))
    return {"CPU ms/step per rank": cpu, "CPU busy %": busy}


def _per_device(throughput: float | None, devices: int) -> float | None:
    return None if throughput is None else throughput / devices


def _wait_percent(metrics: dict) -> float | None:
    """The share of wait + step time the steps waited for their batch (records before schema
    4 did not measure it)."""
    share = (metrics.get("input") or {}).get("wait_share")
    return None if share is None else 100 * share


CPU_BUSY_BAND = (80.0, 120.0)  # CPU busy % within 20 % of every thread busy the whole step


def cpu_lines(rows: list[Row]) -> list[str]:
    """The rows whose CPU time per step differs from threads x wall time by more than 20 %,
    one line for all, each with its figures (none: no line)."""
    low, high = CPU_BUSY_BAND
    odd = [f"{row.label} {row.cells['CPU busy %']:.0f} % ({row.cells['CPU ms/step per rank']:.3g}"
           f" ms CPU against {row.cells['step ms p50']:.3g} ms wall)" for row in rows
           if row.cells.get("CPU busy %") is not None
           and not low <= row.cells["CPU busy %"] <= high]
    if not odd:
        return []
    return ["CPU time differs from threads x wall time by more than 20 % (CPU busy %: below, "
            "threads wait, for a collective or a core another process holds; above, threads "
            "beyond those asked for): " + "; ".join(odd) + "."]


def is_profiled(record: dict) -> bool:
    """A --profile run: the profiler's overhead is in its times, so its row never enters a
    performance, accuracy or headline table; the Profiles table shows it instead."""
    return bool((record.get("variant") or {}).get("profile"))
