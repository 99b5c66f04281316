"""Runs in segments: a run stopped (preempted) or checkpointed and resumed with --resume-from is
two or more records, each resumed one naming the checkpoint and the run it continues
(``resumed.run_id``). The report joins them into one chain per training, its steps end to end,
and keeps each segment's time its own: a segment's start-up, checkpoint loading and
checkpoint writing are its own, so a sum would be no run's time."""

from __future__ import annotations

from .rows import Cell

HEADING = "Resumed runs"
COLUMNS = ("backend", "devices", "segment", "steps", "status", "checkpoints", "run s", "train s")
NOTE = ("Each training that was resumed from a checkpoint, its segments in order: the steps "
        "each ran (from its checkpoint's step), its status (preempted: stopped by a signal "
        "after writing a checkpoint), the checkpoints it wrote, and its own times (the whole "
        "segment, and its training steps alone); the times are not added, since each segment "
        "has its own start-up. A resumed run's time to target would start at its resume, so "
        "resumed runs are in no time-to-target table.")


def chains(records: list[dict]) -> list[list[dict]]:
    """Each training of two or more segments, first segment first; a segment whose run is not
    among ``records`` starts its chain."""
    by_id = {r["run_id"]: r for r in records}
    followers = {r["resumed"]["run_id"]: r for r in records if "resumed" in r}
    found = []
    for record in records:
        continues = record.get("resumed", {}).get("run_id")
        if continues in by_id or (continues is None and record["run_id"] not in followers):
            continue
        chain = [record]
        while chain[-1]["run_id"] in followers:
            chain.append(followers[chain[-1]["run_id"]])
        found.append(chain)
    return found


def rows(records: list[dict]) -> list[dict[str, Cell]]:
    """One row per segment of each chain (COLUMNS)."""
    return [_row(segment, index) for chain in chains(records)
            for index, segment in enumerate(chain, start=1)]


def _row(record: dict, index: int) -> dict[str, Cell]:
    first = record.get("resumed", {}).get("step", 0)
    written = record.get("checkpoints", {}).get("written", [])
    metrics = record.get("metrics") or {}
    return {"backend": record["backend"], "devices": record["world_size"], "segment": index,
            "steps": f"{first + 1}-{first + record['steps']}", "status": record["status"],
            "checkpoints": ", ".join(str(w["step"]) for w in written) or None,
            "run s": record["duration_s"], "train s": metrics.get("train_s")}
