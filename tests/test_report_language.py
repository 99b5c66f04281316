"""The report of a language model's records: tokens per second (and per device), the validation
loss beside the data's floor and the gap, perplexity and next-token accuracy, hand-computed; a
schema-7 record of the language task must carry those figures to be valid."""

from __future__ import annotations

import json

import pytest
from test_report import by_row, markdown_tables, record

from parbench.contract.spec import build_spec
from parbench.results.records import SCHEMA_VERSION, check_record
from parbench.results.report import render
from parbench.results.utilisation import flops_metrics

SPEC = "c" * 64
CONTEXT = 64
FLOOR = 1.45
INPUT = {"pipeline": "arrays", "description": "the contract's shards", "order": "contract",
         "train_size": 4096, "steps_per_epoch": 32, "matches_contract": True,
         "epochs": [{"epoch": 0, "steps": 4, "complete": False, "samples": 512, "unique": 512,
                     "duplicated": 0, "dropped": None}],
         "fingerprints": ["0" * 64], "indices": [], "wait_s_mean": 0.0, "wait_share": 0.0}


def language_record(backend: str, devices: int, repeat: int, tokens_per_s: float,
                    loss: float) -> dict:
    """test_report's record made a schema-7 language-model one: its step time follows from the
    tokens per step, its metrics are the language task's."""
    base = record(backend, "torch", devices, repeat, tokens_per_s / CONTEXT, spec=SPEC)
    metrics = {**base["metrics"], "throughput": tokens_per_s, "items_per_step": 128 * CONTEXT,
               "final_loss": loss, "final_accuracy": 0.25, "perplexity": float(2.0 ** loss),
               "tokens": 512 * CONTEXT, "loss_floor": FLOOR, "floor_gap": loss - FLOOR,
               "compute_dtype": "float32", "compiled_graphs": None, "sync_bn_layers": 0,
               "micro_batches": 1, "input": INPUT,
               "steady_step_ms": [base["metrics"]["step_time_ms"]["median"]] * 8,
               "state_bytes": [{"parameters": 400, "gradients": 400, "optimizer": 800}] * devices,
               "communication": {"method": "counted", "bytes": {"all-reduce": 400 * (devices > 1)}},
               "nodes": [{"node": 0, "host": "h", "ranks": list(range(devices)),
                          "step_time_ms": base["metrics"]["step_time_ms"], "score_s": 0.1,
                          "data_wait_ms": 0.0}],
               "flops": flops_metrics(build_spec("gpt", (CONTEXT,), 64), 128,
                                      base["metrics"]["step_time_ms"]["median"], devices,
                                      {"framework": "torch", "framework_version": "2.5.1",
                                       "compute_dtype": "float32", "peak_threads": devices,
                                       "nodes": 1, "gpu_model": None}),
               "cpu_ms_per_step": {"user": [1.0] * devices, "system": [0.1] * devices},
               "target": None}
    return {**base, "schema_version": SCHEMA_VERSION, "task": "language-modeling",
            "model": "gpt", "dataset": "markov", "metrics": metrics, "nnodes": 1,
            "node_rank": 0, "hosts": ["h"] * devices, "variant": {"threads": 1, "nnodes": 1},
            "modes": {"precision": "fp32", "compile": False, "sync_bn": False,
                      "grad_accum": 1, "input": "arrays", "loader_workers": 0,
                      "reshard_after_forward": "yes"},
            "env": {**base["env"], "network_isolated": False, "load_1m_start": 0.1,
                    "load_1m_end": 0.1, "other_cpu_s": 0.0, "memory_gib": 24.0,
                    "libraries": {"numpy": "2.0.0", "keras": None}}}


RECORDS = [language_record("torch-single", 1, i, t, loss)
           for i, (t, loss) in enumerate([(60000.0, 3.0), (66000.0, 3.2), (63000.0, 3.1)])] + \
          [language_record("torch-ddp", 2, i, t, 3.1) for i, t in enumerate([90000.0, 94000.0])]


def test_the_records_are_valid_and_a_language_record_without_its_figures_is_not():
    assert all(check_record(r) == [] for r in RECORDS)
    stripped = json.loads(json.dumps(RECORDS[0]))
    del stripped["metrics"]["loss_floor"]
    assert any("loss_floor" in problem for problem in check_record(stripped))
    untasked = {k: v for k, v in RECORDS[0].items() if k != "task"}
    assert any("'task' is a required property" in p for p in check_record(untasked))


@pytest.fixture(scope="module")
def tables() -> dict[str, dict]:
    """The spec's tables by caption, rows keyed by (backend, devices)."""
    return {caption: by_row(rows) for (section, caption), rows
            in markdown_tables(render(RECORDS)).items() if section.startswith(f"spec {SPEC[:10]}")}


def test_throughput_counts_tokens_overall_and_per_device(tables):
    rows = tables["Performance"]
    single, ddp = rows[("torch-single", "1")], rows[("torch-ddp", "2")]
    assert single["tokens/s"] == "63000" and single["tokens/s per device"] == "63000"
    assert ddp["tokens/s"] == "92000" and ddp["tokens/s per device"] == "46000"
    assert ddp["scaling eff."] == "0.7302"  # 92000 / (2 x 63000)


def test_quality_shows_the_loss_beside_its_floor(tables):
    rows = tables["Accuracy and memory"]
    single = rows[("torch-single", "1")]
    assert single["val loss"] == "3.1" and single["loss floor"] == "1.45"
    assert single["gap to floor"] == "1.65" and single["perplexity"] == "8.574"  # 2 ** 3.1
    assert single["next-token acc."] == "0.25"
    assert "Precision macro" not in single
