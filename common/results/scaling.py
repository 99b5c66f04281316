"""A row's scaling, stated so it cannot be misread: its efficiency against N x the 1-device
reference, with a 95% interval, and, where the N devices of a run share the cores of one CPU,
how many cores they shared and the fair reference: the framework's single backend given all
the threads the N devices had together. On shared cores N devices can at best match that one
process, so an efficiency of 1/N is what perfect data parallelism looks like there."""

from __future__ import annotations

from typing import TYPE_CHECKING

from parbench.run.registry import BACKENDS, FRAMEWORKS

from .intervals import Interval, Ratio
from .paired import versus

if TYPE_CHECKING:
    from .rows import Cell, Row

COLUMNS = ("scaling eff.", "scaling eff. 95% low", "scaling eff. 95% high", "shared cores",
           "vs single same threads", "vs single same threads 95% low",
           "vs single same threads 95% high", "same-threads reference")


def single_backend(framework: str) -> str | None:
    """The framework's 1-device backend (None for a framework this version does not know)."""
    info = FRAMEWORKS.get(framework)
    return info.single if info else None


def _one_value(values: set) -> object:
    return next(iter(values)) if len(values) == 1 else None


def threads_per_worker(row: Row) -> int | None:
    """The threads each worker of the row's runs had (None where its repeats differ)."""
    return _one_value({r["env"]["threads_per_worker"] for r in row.runs})


def total_threads(row: Row) -> int | None:
    """The threads of every worker of a run together: one process drives every device of a
    one-process backend (DataParallel, MirroredStrategy, pmap); else one process per device."""
    threads = threads_per_worker(row)
    backend = BACKENDS.get(row.backend)
    if threads is None or backend is None:
        return None
    return threads * (1 if backend.one_process else row.devices)


def shared_cores(row: Row) -> int | None:
    """The cores the row's devices shared: a run on one node whose devices are all CPU
    devices shares that CPU's cores (None for one device, GPUs, or several nodes)."""
    if row.devices < 2 or row.nodes > 1:
        return None
    names = [name for r in row.runs for name in r["env"]["device_names"]]
    if not names or any("cpu" not in name.lower() for name in names):
        return None
    return _one_value({r["env"]["cores"] for r in row.runs})


def _speed_ratio(row: Row, reference: Row, devices: int) -> Ratio:
    if reference is row:  # the reference itself: exactly 1, no uncertainty
        return Ratio(1.0, None)
    return versus(row, reference, devices)


def _efficiency_reference(row: Row, rows: list[Row]) -> Row | None:
    """The framework's single backend at 1 device, else the same backend at 1 device, with
    the same modes (those that matter on one device) and, where it has several, the threads
    a run gets by default and the row's launcher."""
    for backend in (single_backend(row.framework), row.backend):
        refs = sorted((r for r in rows if r.backend == backend and r.devices == 1
                       and r.modes.same_on_one_device(row.modes) and r.throughput is not None),
                      key=lambda r: (not r.default_threads, r.launcher != row.launcher))
        if refs:
            return refs[0]
    return None


def _same_threads_reference(row: Row, rows: list[Row]) -> Row | None:
    """The framework's single backend at 1 device whose one worker had as many threads as the
    row's workers together."""
    total = total_threads(row)
    return next((r for r in rows if r.backend == single_backend(row.framework)
                 and r.devices == 1
                 and r.modes.same_on_one_device(row.modes) and r.throughput is not None
                 and threads_per_worker(r) == total), None)


def _ratio_cells(name: str, value: Ratio | None) -> dict[str, Cell]:
    interval: Interval | None = value.interval if value else None
    return {name: value.value if value else None,
            f"{name} 95% low": interval.low if interval else None,
            f"{name} 95% high": interval.high if interval else None}


def scaling_cells(row: Row, rows: list[Row]) -> dict[str, Cell]:
    """The row's COLUMNS, each None where it does not apply or has no reference."""
    if row.throughput is None:
        return dict.fromkeys(COLUMNS)
    reference = _efficiency_reference(row, rows)
    efficiency = _speed_ratio(row, reference, row.devices) if reference else None
    cores = shared_cores(row)
    fair = _same_threads_reference(row, rows) if cores else None
    return {**_ratio_cells("scaling eff.", efficiency), "shared cores": cores,
            **_ratio_cells("vs single same threads", _speed_ratio(row, fair, 1) if fair else None),
            "same-threads reference": f"{fair.backend}, {threads_per_worker(fair)} threads"
            if fair else None}
