"""The runs the report keeps out of its performance and accuracy tables, built here from a
reference record and checked cell by cell: a diverged run (Diverged runs: where each repeat
stopped) and a profiled run (Profiles: median phase times over the ok repeats, the first
repeat's top operations). Real diverged and profiled runs go through the report in
test_divergence.py and test_profile.py."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from parbench.results.groups import build_groups
from parbench.results.records import check_record
from parbench.results.rows import is_profiled

REFERENCE = sorted((Path(__file__).resolve().parents[1] / "results" / "reference" / "runs")
                   .glob("jax-pmap-python-n2-*-r0.json"))[0]  # schema 5: nodes and modes
PHASES = ("forward", "backward", "optimizer", "communication", "step")


def base(repeat: int) -> dict:
    record = json.loads(REFERENCE.read_text())
    record.update(schema_version=6, repeat=repeat, run_id=f"{record['run_id']}-{repeat}")
    return record


def diverged(repeat: int, step: int, rank: int, loss: str) -> dict:
    record = base(repeat)
    record.update(status="diverged", metrics=None, lr=7.5,
                  error=f"diverged at step {step}: rank {rank}'s loss is {loss}",
                  diverged={"step": step, "rank": rank, "loss": loss})
    assert check_record(record) == [], check_record(record)
    return record


def profiled(repeat: int, scale: float, status: str = "ok") -> dict:
    record = base(repeat)
    record["variant"] = {**record["variant"], "profile": True}
    record["profile"] = {"file": f"r{repeat}.profile.json", "tool": "jax.profiler",
                         "steps": [5, 15], "slowest_rank": 1,
                         "median_ms": {p: scale * (i + 1) for i, p in enumerate(PHASES)},
                         "top_ops": [{"name": f"conv{repeat}", "self_ms_per_step": 1.23456},
                                     {"name": "addmm", "self_ms_per_step": 0.5}]}
    if status != "ok":
        record.update(status=status, metrics=None, error=f"{status}: the worker died\nmore")
    assert check_record(record) == [], check_record(record)
    return record


def test_diverged_repeats_are_listed_where_they_stopped_and_nowhere_else() -> None:
    [group] = build_groups([diverged(0, 3, 1, "nan"), diverged(1, 5, 0, "inf")])
    assert group.rows == [] and group.profiles == []
    [row] = group.diverged
    assert row.cells["repeats"] == 2
    assert (row.cells["at step"], row.cells["rank"], row.cells["loss"]) == (
        [3, 5], [1, 0], ["nan", "inf"])
    assert row.cells["lr"] == 7.5
    assert (row.cells["backend"], row.cells["devices"]) == ("jax-pmap", 2)


def test_profiled_repeats_give_median_phases_and_the_first_ok_repeats_top_ops() -> None:
    records = [profiled(0, 1.0), profiled(1, 3.0), profiled(2, 2.0),
               profiled(3, 100.0, status="failed")]
    assert all(is_profiled(r) for r in records) and not is_profiled(base(0))
    [group] = build_groups(records)
    assert group.rows == [] and group.diverged == []
    [row] = group.profiles
    assert row.cells["runs"] == "3/4"
    assert row.cells["status"] == "failed: failed: the worker died"
    for i, phase in enumerate(PHASES):
        assert row.cells[f"{phase} ms"] == pytest.approx(2.0 * (i + 1)), phase
    assert row.cells["top ops (ms/step)"] == "conv0 1.23; addmm 0.5"


def test_a_profiled_run_without_ok_repeats_has_no_figures() -> None:
    [group] = build_groups([profiled(0, 1.0, status="failed")])
    [row] = group.profiles
    assert row.cells["runs"] == "0/1" and row.cells["top ops (ms/step)"] is None
    assert all(row.cells[f"{phase} ms"] is None for phase in PHASES)


def test_plain_runs_beside_them_stay_in_the_tables() -> None:
    plain = base(0)
    groups = build_groups([plain, diverged(1, 2, 0, "nan"), profiled(2, 1.0)])
    [group] = groups
    assert [row.backend for row in group.rows] == ["jax-pmap"]
    assert len(group.diverged) == 1 and len(group.profiles) == 1
    assert group.rows[0].runs == [plain] and copy.deepcopy(plain) == base(0)
