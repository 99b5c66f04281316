"""The report's sharded-against-replicated section, from records written by hand: each sharded
row beside its replicated twin at the same device count, the fullest rank's state, the bytes a
step moves, and one line per pair (also in the headline) with the ratios those figures give."""

from __future__ import annotations

import pytest
from test_report import TITLE_A, by_row, markdown_tables, record

from parbench.results.report import render
from parbench.run.registry import FRAMEWORKS

MIB = 2 ** 20


def with_footprint(base: dict, state: list[dict], moved: dict | None,
                   reshard: str = "yes") -> dict:
    base.update(schema_version=1)
    base["metrics"].update(state_bytes=state,
                           communication={"method": "counted: test", "bytes": moved})
    base["modes"] = {"reshard_after_forward": reshard}
    return base


def replica(params: int) -> dict:
    return {"parameters": params, "gradients": params, "optimizer": 2 * params}


RECORDS = [
    with_footprint(record("torch-ddp", "torch", 2, 0, 200.0, launcher="torchrun"),
                   [replica(4 * MIB)] * 2, {"all-reduce": 4 * MIB}),
    # rank 0 holds the larger half (padding): the table shows the fullest rank
    with_footprint(record("torch-fsdp", "torch", 2, 0, 160.0, launcher="torchrun"),
                   [replica(2 * MIB + 4096), replica(2 * MIB - 4096)],
                   {"all-gather": 8 * MIB, "reduce-scatter": 4 * MIB}),
    # a replicated backend with no sharded twin, and a run from before the state was counted
    record("tf-mirrored", "tensorflow", 2, 0, 150.0),
]


def test_sharded_rows_stand_beside_their_replicated_twin_with_the_trade():
    text = render(RECORDS)
    tables = markdown_tables(text)
    rows = by_row(tables[("Sharded against replicated", TITLE_A)])
    assert set(rows) == {("torch-ddp", "2"), ("torch-fsdp", "2")}
    ddp, fsdp = rows[("torch-ddp", "2")], rows[("torch-fsdp", "2")]
    assert (ddp["state MiB per rank"], ddp["comm MiB per step"]) == ("16", "4")
    assert ddp["collectives"] == "all-reduce 4"
    assert float(fsdp["params MiB"]) == pytest.approx((2 * MIB + 4096) / MIB, rel=1e-3)
    assert fsdp["collectives"] == "all-gather 8, reduce-scatter 4"
    assert (ddp["reshard"], fsdp["reshard"]) == ("-", "yes")
    state = 4 * (2 * MIB + 4096) / (16 * MIB)  # the fullest rank against a whole replica
    line = (f"torch x2: torch-fsdp [torchrun] x2 holds {state:.2f}x the state per rank of "
            f"torch-ddp, moves 3.00x the bytes and takes 1.25x the step time.")
    assert text.count(line) == 2  # in the section and in the headline
    # a framework with rows but no sharded backend: the reason, from the registry
    assert f"tensorflow: no sharded backend: {FRAMEWORKS['tensorflow'].no_sharding}." in text


def test_no_section_without_a_sharded_pair():
    text = render([RECORDS[0], RECORDS[2]])
    assert "Sharded against replicated" not in text
    assert "x the state per rank" not in text  # no trade line
