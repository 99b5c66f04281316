"""The report of multi-node runs (record schema 5: ``nnodes``, ``hosts``, ``metrics.nodes``): each
node count has rows of its own, scaling efficiency counts every device of every node, and a
Per node table shows each node's step time (alike on every node: the all-reduce waits for the
slowest rank), its scoring time against the row's fastest node and its batch wait, with figures
computed here by hand. The records are valid older records with the schema-5 fields set by
hand; the report is rendered in this process, because ``parbench report`` validates its input
against the schema and these records are not checked against it here."""

from __future__ import annotations

import copy
import csv
import io

import pytest
from test_report import RECORDS, markdown_tables, record

from parbench.results.html_report import write_report
from parbench.results.methods import NODES_NOTE
from parbench.results.report import PER_NODE_NOTE, render

TITLE = ("spec aaaaaaaaaa: model resnet, dataset synthetic, global batch 128 (global batch "
         "fixed), 4 steps, lr 0.05, seed 0")


def multi_node(base: dict, step_ms: float, hosts: list[str],
               score_s: list[float] | None = None,
               wait_ms: list[float] | None = None) -> dict:
    """``base`` run on len(hosts) nodes of world_size / nodes devices each: node i on hosts[i],
    node 0 writing the record. Every node has the median step time ``step_ms`` (p10 and p90
    around it), as the all-reduce makes it; node i scored its part of the test set in
    score_s[i] seconds and waited wait_ms[i] ms per batch (neither given: a record before
    these figures, whose entries lack them)."""
    nodes, result = len(hosts), copy.deepcopy(base)
    per_node = result["world_size"] // nodes
    result.update(schema_version=5, nnodes=nodes, node_rank=0,
                  hosts=[host for host in hosts for _ in range(per_node)],
                  variant={"threads": None, "nnodes": nodes})
    result["metrics"]["nodes"] = [
        {"node": i, "host": host, "ranks": list(range(i * per_node, (i + 1) * per_node)),
         "step_time_ms": {"median": step_ms, "p10": 0.9 * step_ms, "p90": 1.1 * step_ms},
         **({"score_s": score_s[i]} if score_s else {}),
         **({"data_wait_ms": wait_ms[i]} if wait_ms else {})}
        for i, host in enumerate(hosts)]
    return result


def ddp(world_size: int, repeat: int, throughput: float) -> dict:
    return record("torch-ddp", "torch", world_size, repeat, throughput, launcher="torchrun")


RECORDS_NODES = [
    record("torch-single", "torch", 1, 0, 100.0),
    ddp(2, 0, 180.0),  # 1 node x 2 devices
    # 2 nodes x 1 device, 2 repeats; node 1 ran on another host in the second repeat and
    # scores 1.5x slower (a slower machine) while both nodes' step times are the same
    multi_node(ddp(2, 0, 150.0), 50.0, ["hostA", "hostB"], [4.0, 6.0], [1.0, 3.0]),
    multi_node(ddp(2, 1, 170.0), 52.0, ["hostA", "hostC"], [4.2, 6.3], [2.0, 5.0]),
    multi_node(ddp(4, 0, 300.0), 60.0, ["hostA", "hostB"], [5.0, 5.5], [0.5, 0.5]),  # 2x2
    multi_node(ddp(3, 0, 240.0), 40.0, ["n1", "n2", "n3"], [3.0, 3.3, 4.5],  # 3 nodes x 1
               [1.0, 1.0, 8.0]),
]


def tables(records: list[dict]) -> dict[tuple[str, str], list[dict[str, str]]]:
    return markdown_tables(render(records))


def test_multi_node_rows_are_their_own_after_the_single_node_ones() -> None:
    performance = tables(RECORDS_NODES)[(TITLE, "Performance")]
    # 2x1 never joins the 1-node x 2 row; 2x2 (4 devices) before 3x1 (3): nodes order first
    assert [(row["backend"], row["devices"], row["runs"]) for row in performance] == [
        ("torch-single", "1", "1/1"), ("torch-ddp", "2", "1/1"), ("torch-ddp", "2x1", "2/2"),
        ("torch-ddp", "2x2", "1/1"), ("torch-ddp", "3x1", "1/1")]


def test_scaling_efficiency_of_a_multi_node_row_counts_every_device() -> None:
    performance = {row["devices"]: row for row in tables(RECORDS_NODES)[(TITLE, "Performance")]}
    # median 160 / (2 devices x 100); 300 / (4 x 100); 240 / (3 x 100); 1 node: 180 / 200
    assert {devices: performance[devices]["scaling eff."] for devices in performance} == {
        "1": "1", "2": "0.9", "2x1": "0.8", "2x2": "0.75", "3x1": "0.8"}
    rows = {(row["nodes"], row["devices"]): row for row in csv.DictReader(io.StringIO(
        render(RECORDS_NODES, "csv")))}
    assert float(rows[("2", "2")]["scaling_eff"]) == 160 / (2 * 100)
    # each node's median scoring time over the repeats, in node order; none on one node
    assert rows[("2", "2")]["node_scoring_s"] == f"{(4.0 + 4.2) / 2!r};{(6.0 + 6.3) / 2!r}"
    assert rows[("3", "3")]["node_scoring_s"] == "3.0;3.3;4.5"
    assert rows[("1", "2")]["node_scoring_s"] == ""


def test_per_node_table_shows_a_slow_node_by_its_scoring_time() -> None:
    text = render(RECORDS_NODES)
    per_node = markdown_tables(text)[(TITLE, "Per node")]
    columns = ("devices", "launcher", "node", "host", "ranks", "step ms p50", "scoring s",
               "scoring vs fastest", "data wait ms")
    assert [tuple(row[c] for c in columns) for row in per_node] == [
        # medians over 2 repeats: equal step times (51 ms) on both nodes, while node 1 scores
        # in 6.15 s against node 0's 4.1 s: 6.15 / 4.1 = 1.5; waits 1.5 and 4 ms
        ("2x1", "torchrun", "0", "hostA", "0", "51", "4.1", "x1.00", "1.5"),
        ("2x1", "torchrun", "1", "hostB/hostC", "1", "51", "6.15", "x1.50", "4"),
        ("2x2", "torchrun", "0", "hostA", "0-1", "60", "5", "x1.00", "0.5"),
        ("2x2", "torchrun", "1", "hostB", "2-3", "60", "5.5", "x1.10", "0.5"),
        ("3x1", "torchrun", "0", "n1", "0", "40", "3", "x1.00", "1"),
        ("3x1", "torchrun", "1", "n2", "1", "40", "3.3", "x1.10", "1"),
        ("3x1", "torchrun", "2", "n3", "2", "40", "4.5", "x1.50", "8")]
    assert {row["backend"] for row in per_node} == {"torch-ddp"}
    assert f"- {PER_NODE_NOTE}" in text and NODES_NOTE in text
    assert "alike on every node by construction" in PER_NODE_NOTE


def test_records_without_scoring_times_leave_the_ratio_empty() -> None:
    """Schema-5 records written before score_s and data_wait_ms: their cells are empty, the
    step times still show, and the CSV's per-node column is empty for their row."""
    older = [record("torch-single", "torch", 1, 0, 100.0),
             multi_node(ddp(2, 0, 150.0), 50.0, ["hostA", "hostB"])]
    assert all("score_s" not in node for node in older[1]["metrics"]["nodes"])
    per_node = markdown_tables(render(older))[(TITLE, "Per node")]
    assert [(row["node"], row["step ms p50"], row["scoring s"], row["scoring vs fastest"],
             row["data wait ms"]) for row in per_node] == [
        ("0", "50", "-", "-", "-"), ("1", "50", "-", "-", "-")]
    rows = {row["nodes"]: row for row in csv.DictReader(io.StringIO(render(older, "csv")))}
    assert rows["2"]["node_scoring_s"] == ""
    # null, as the schema allows, reads the same as absent
    nulls = copy.deepcopy(older)
    for node in nulls[1]["metrics"]["nodes"]:
        node.update(score_s=None, data_wait_ms=None)
    assert render(nulls) == render(older)


def test_headline_gives_each_node_count_its_own_line() -> None:
    text = render(RECORDS_NODES)
    headline = markdown_tables(text)[("Headline", TITLE)]
    assert [(row["devices"], row["approach"], row["samples/s"], row["scaling eff."])
            for row in headline] == [
        ("1", "torch-single", "100", "1"), ("2", "torch-ddp [torchrun]", "180", "0.9"),
        ("2x1", "torch-ddp [torchrun] on 2 nodes", "160", "0.8"),
        ("2x2", "torch-ddp [torchrun] on 2 nodes", "300", "0.75"),
        ("3x1", "torch-ddp [torchrun] on 3 nodes", "240", "0.8")]
    # 150 / 170: sample sd 14.14 / mean 160 = 8.8 % > 5 %
    assert "- torch: noisy: torch-ddp [torchrun] x2 on 2 nodes (cv 8.8 %)" in text


def test_no_per_node_table_without_a_multi_node_run() -> None:
    text = render(RECORDS)
    assert "Per node" not in text and NODES_NOTE not in text
    assert {row["node_scoring_s"] for row in csv.DictReader(io.StringIO(render(RECORDS, "csv")))
            } == {""}


def test_a_record_without_nnodes_reads_as_one_node() -> None:
    """Schema 5's fields on one node change nothing: the same report as the older record (the
    schema number aside, which the environment table shows)."""
    older = [record("torch-single", "torch", 1, 0, 100.0), ddp(2, 0, 180.0)]
    newer = [multi_node(r, 1000.0, ["hostA"], [2.0], [1.0]) for r in older]
    assert [r["nnodes"] for r in newer] == [1, 1]
    older = [{**r, "schema_version": 5} for r in older]
    for fmt in ("md", "csv"):
        assert render(newer, fmt) == render(older, fmt)


@pytest.mark.slow
def test_html_page_has_the_per_node_table_and_its_plots_draw() -> None:
    html = write_report(RECORDS_NODES, "html")
    # headline, performance, accuracy and memory, per node, environment
    assert html.count("<table>") == 5 and "<caption>Per node</caption>" in html
    assert ">hostB/hostC</td>" in html and ">x1.50</td>" in html
    # the first node of each of the 3 multi-node rows is marked, as is the first row of each of
    # the headline's 5 device and node counts, and torch's first row in the performance and
    # accuracy tables
    assert html.count('<tr class="first') == 3 + 5 + 2
    # the throughput, step time, memory and curves figures and the headline's forest plot
    assert html.count('<img src="data:image/png;base64,') == 5
