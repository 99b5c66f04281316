"""A multi-node row split by node (record schema 5's ``metrics.nodes``): the Per node table's
rows and the CSV's per-node column. In lockstep data parallelism every rank waits for the
slowest in the gradient all-reduce, so each node's step time comes out alike; what tells a
slow node apart is what no collective evens out: how long its ranks take to score their part
of the test set, and how long they wait for their batches."""

from __future__ import annotations

from collections import defaultdict

from .rows import KEY, Cell, Row, median_of

NODE_SCORES = "node scoring s"  # the CSV's column: a multi-node row's scoring time per node


def _nodes(row: Row) -> dict[int, list[dict]]:
    """Each node's entries (``metrics.nodes``) over the ok repeats, by node, in node order;
    none for a single-node row, nor in records before schema 5."""
    entries: dict[int, list[dict]] = defaultdict(list)
    for m in row.metrics if row.nodes > 1 else []:
        for node in m.get("nodes") or []:
            entries[node["node"]].append(node)
    return dict(sorted(entries.items()))


def _figures(entries: list[dict]) -> dict[str, float | None]:
    """A node's medians over the repeats; score_s and data_wait_ms are None or absent in
    records that predate them, and then so is their median."""
    return {"step ms p50": median_of(e["step_time_ms"]["median"] for e in entries),
            "scoring s": median_of(e.get("score_s") for e in entries),
            "data wait ms": median_of(e.get("data_wait_ms") for e in entries)}


def _vs_fastest(value: float | None, values: list[float | None]) -> str | None:
    """``value`` / the lowest of ``values``: x1.00 for the fastest, x1.50 for one 1.5x slower;
    None where there is nothing to compare."""
    present = [v for v in values if v is not None]
    if value is None or not present or min(present) <= 0:
        return None
    return f"x{value / min(present):.2f}"


def _ranks(ranks: list[int]) -> str:
    """A node's ranks: '0-3' where they run without a gap (as launchers number them)."""
    if len(ranks) > 1 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    return ", ".join(map(str, ranks))


def node_rows(row: Row) -> list[dict[str, Cell]]:
    """One row per node of a multi-node row's ok repeats (none for a single-node row): its
    host(s), ranks, median step time, scoring time (and that time against the row's fastest
    node by scoring time) and batch wait over the repeats."""
    nodes = _nodes(row)
    figures = {node: _figures(entries) for node, entries in nodes.items()}
    scores = [f["scoring s"] for f in figures.values()]
    return [{**{k: row.cells[k] for k in KEY}, "node": node,
             # the repeats of a row may have been given other machines
             "host": "/".join(dict.fromkeys(e["host"] for e in entries)),
             "ranks": _ranks(entries[0]["ranks"]), **figures[node],
             "scoring vs fastest": _vs_fastest(figures[node]["scoring s"], scores)}
            for node, entries in nodes.items()]


def node_scores(row: Row) -> list[float | None] | None:
    """The CSV's NODE_SCORES cell: each node's median scoring time, in node order; None for a
    single-node row and where no node's records measured it."""
    scores = [_figures(entries)["scoring s"] for entries in _nodes(row).values()]
    return scores if any(s is not None for s in scores) else None
