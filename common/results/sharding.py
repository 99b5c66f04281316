"""The report's sharded-against-replicated comparison: per framework and device count, a sharded
backend's row (FSDP, ZeRO) beside its replicated twin's (DDP, jit with replicated state), with
the training state each rank holds after the first step (record schema 8's
``metrics.state_bytes``), the bytes one step's collectives carry (``metrics.communication``),
step time and scaling efficiency; and one line per pair naming the trade. It reads the rows
report.py built and imports nothing of it."""

from __future__ import annotations

from parbench.run.registry import BACKENDS, FRAMEWORKS

from .paired import versus
from .rows import KEY, Cell, Row

MIB = 2 ** 20
COLUMNS = (*KEY, "state MiB per rank", "params MiB", "grads MiB", "optimizer MiB",
           "comm MiB per step", "collectives", "step ms p50", "scaling eff.")
NOTES = [
    "State: the parameters, gradients and optimizer state the fullest rank (device) holds after "
    "the first step, counted from its live tensors; a gradient that lives only inside a "
    "compiled step is not state (0). Communication: what one step's collectives carry per "
    "device, an all-gather counted by its output, a reduce-scatter by its input, an all-reduce "
    "by its buffer (the whole tensor each combines); the record's method says where the bytes "
    "were read. gloo (CPU) has no reduce-scatter of its own and carries one out as an "
    "all-reduce: the bytes are what the strategy asks for, as NCCL would carry them.",
]


def _state(row: Row) -> dict[str, int] | None:
    """The fullest device's state (the same in every repeat: take the first ok one's)."""
    held = next((m.get("state_bytes") for m in row.metrics if m.get("state_bytes")), None)
    if not held:
        return None
    return max(held, key=lambda device: sum(device.values()))


def _moved(row: Row) -> dict | None:
    return next((m.get("communication") for m in row.metrics if m.get("communication")), None)


def _mib(value: int | None) -> float | None:
    return None if value is None else value / MIB


def sharding_cells(row: Row) -> dict[str, Cell]:
    state, moved = _state(row), _moved(row)
    counted = (moved or {}).get("bytes")
    return {**{k: row.cells[k] for k in KEY},
            "state MiB per rank": _mib(sum(state.values())) if state else None,
            "params MiB": _mib(state["parameters"]) if state else None,
            "grads MiB": _mib(state["gradients"]) if state else None,
            "optimizer MiB": _mib(state["optimizer"]) if state else None,
            "comm MiB per step": _mib(sum(counted.values())) if counted is not None else None,
            "collectives": ", ".join(f"{kind} {_mib(size):.3g}" for kind, size in counted.items())
            if counted else ("none" if counted == {} else "not counted"),
            "step ms p50": row.cells["step ms p50"], "scaling eff.": row.cells["scaling eff."]}


def sharded_pairs(rows: list[Row]) -> list[tuple[Row, Row]]:
    """(replicated, sharded) rows of the same framework, devices, nodes and modes (the sharded
    one's reshard choice aside), the sharded backend's twin (registry: ``replicated_twin``);
    the same launcher first where there is a choice."""
    pairs = []
    for sharded in rows:
        twin = BACKENDS[sharded.backend].replicated_twin if sharded.backend in BACKENDS else None
        matches = sorted((row for row in rows if row.backend == twin
                          and (row.devices, row.nodes) == (sharded.devices, sharded.nodes)
                          and _same_modes(row, sharded)),
                         key=lambda row: row.launcher != sharded.launcher)
        if matches and _state(matches[0]) and _state(sharded):
            pairs.append((matches[0], sharded))
    return pairs


def _same_modes(replicated: Row, sharded: Row) -> bool:
    ours = {k: v for k, v in sharded.modes.as_dict().items() if k != "reshard_after_forward"}
    theirs = {k: v for k, v in replicated.modes.as_dict().items()
              if k != "reshard_after_forward"}
    return ours == theirs


def unsharded_frameworks(rows: list[Row]) -> list[str]:
    """Why each framework in ``rows`` without a sharded row has none, where the registry says
    (a framework without sharded data parallelism, or a sharded backend for GPUs only)."""
    lines = []
    for name in dict.fromkeys(row.framework for row in rows):
        if any(BACKENDS.get(row.backend) and BACKENDS[row.backend].sharded
               for row in rows if row.framework == name) or name not in FRAMEWORKS:
            continue
        framework = FRAMEWORKS[name]
        gpu_only = [b for b in framework.backends if b.sharded and b.gpu_only]
        if framework.no_sharding:
            lines.append(f"{name}: no sharded backend: {framework.no_sharding}.")
        elif gpu_only:
            lines.append(f"{name}: its sharded backend {gpu_only[0].name} runs on GPUs only: "
                         f"{gpu_only[0].gpu_only}.")
    return lines


def trade_line(replicated: Row, sharded: Row) -> str:
    """One line: how much state per rank sharding saves, and what it costs in bytes moved and
    step time."""
    state = sum(_state(sharded).values()) / sum(_state(replicated).values())
    line = (f"{sharded.framework} x{sharded.devices}: {sharded.label} holds {state:.2f}x the "
            f"state per rank of {replicated.backend}")
    moved = [(_moved(row) or {}).get("bytes") for row in (replicated, sharded)]
    if all(moved) and sum(moved[0].values()):
        line += f", moves {sum(moved[1].values()) / sum(moved[0].values()):.2f}x the bytes"
    if replicated.throughput and sharded.throughput:
        # the same global batch a step: the step times' ratio is the throughputs' inverse
        slower = versus(replicated, sharded)
        line += f" and takes {slower.value:.2f}x the step time"
        if slower.interval:
            line += f" (95% interval {slower.interval.text()}, {slower.interval.method}" + (
                "; holds 1: no difference to trust)" if slower.interval.low <= 1
                <= slower.interval.high else ")")
    return line + "."
