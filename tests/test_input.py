"""The framework-free side of --input: the contract's feed, the record's account of what each
device trained on (parbench.results.samples), the run options and the report's input columns. Each
framework's native loaders are tested in test_input_<framework>.py."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from test_modes import v3
from test_report import markdown_tables, record

from conftest import FEED_ONLY, UNEVEN_INPUT, needs, parbench, run_ok, uneven_input_row
from parbench.contract.batches import schedule
from parbench.contract.data import load_synthetic
from parbench.results.records import check_record
from parbench.results.samples import epoch_accounts, fingerprint, input_metrics
from parbench.run.feeds import ArrayFeed, Batch, FeedLog, samples_file
from parbench.run.job import Job
from parbench.run.modes import Modes


def job(world_size: int, global_batch: int = 8, **extra) -> Job:
    return Job(backend="torch-ddp", launcher="spawn", world_size=world_size, threads=1,
               model={}, dataset="synthetic", task_name="image-classification",
               task_fields={"classes": 10}, global_batch=global_batch,
               total_steps=5, optimizer={}, seed=3, workdir="/nonexistent", shared="/x",
               **extra)


def test_the_arrays_feed_gives_each_device_its_contiguous_shard_of_the_contract():
    data = load_synthetic(n_train=40, n_test=8)
    # 4 devices in 2 processes (e.g. 2 workers x 2 replicas): process 1 drives devices 2, 3
    feed = ArrayFeed(job(world_size=4), data, rank=1, num_processes=2)
    batches = list(feed.batches(7))
    steps = list(schedule(3, 40, 8, 7))
    assert feed.steps_per_epoch == 5 and len(batches) == 7
    for batch, step in zip(batches, steps):
        assert batch.indices.tolist() == [step.indices[4:6].tolist(),
                                          step.indices[6:8].tolist()]
        assert np.array_equal(batch.x, data.x_train[step.indices[4:8]])
        assert (batch.epoch, batch.epoch_end) == (step.epoch, step.epoch_end)
    assert [b.epoch for b in batches] == [0] * 5 + [1] * 2


def test_the_epoch_account_counts_duplicates_and_never_seen_samples():
    # 2 steps x 2 devices x 2 rows over 10 samples; epoch 0: sample 3 twice, 4..9 unseen
    samples = np.array([[[0, 1], [2, 3]], [[3, 4], [5, 6]], [[7, 8], [9, 0]]])
    accounts = epoch_accounts(samples, [0, 0, 1], [False, True, False], train_size=10)
    assert accounts == [
        {"epoch": 0, "steps": 2, "complete": True, "samples": 8, "unique": 7, "duplicated": 1,
         "dropped": 3},
        # a cut epoch: what it saw, but no claim about what it would have dropped
        {"epoch": 1, "steps": 1, "complete": False, "samples": 4, "unique": 4,
         "duplicated": 0, "dropped": None}]


def _write_rank(folder: Path, rank: int, batches: list[Batch], waits: list[float]) -> dict:
    fed = FeedLog(SimpleNamespace(description="test feed", order="contract",
                                  steps_per_epoch=5))
    for batch, wait in zip(batches, waits):
        fed.add(batch, wait)
    return fed.write(folder, rank)


def test_input_metrics_prove_the_contract_and_measure_the_wait(tmp_path, monkeypatch):
    data = load_synthetic(n_train=40, n_test=8)
    logs = []
    for rank in range(2):
        batches = list(ArrayFeed(job(2), data, rank, 2).batches(5))
        summary = _write_rank(tmp_path, rank, batches, [0.01 * (rank + 1)] * 5)
        logs.append(SimpleNamespace(input=summary, step_s=[0.09] * 5))
    metrics = input_metrics(tmp_path, logs, "arrays", seed=3, global_batch=8, train_size=40)
    assert metrics["matches_contract"] is True
    assert metrics["epochs"] == [{"epoch": 0, "steps": 5, "complete": True, "samples": 40,
                                  "unique": 40, "duplicated": 0, "dropped": 0}]
    contract = np.stack([s.indices.reshape(2, 4) for s in schedule(3, 40, 8, 5)])
    assert metrics["fingerprints"] == [fingerprint(contract[:, d]) for d in range(2)]
    assert metrics["indices"] == contract.transpose(1, 0, 2).tolist()
    # waits 0.01 and 0.02 against steps of 0.09: 0.15 / (0.15 + 0.9)
    assert metrics["wait_share"] == pytest.approx(0.15 / 1.05)
    assert metrics["wait_s_mean"] == pytest.approx(0.015)
    # one device fed another's rows: no longer the contract, and the fingerprints say which
    swapped = np.load(tmp_path / samples_file(1))
    np.save(tmp_path / samples_file(1), swapped[:, :, ::-1])
    monkeypatch.setattr("parbench.results.samples.INDEX_LIST_LIMIT", 10)
    changed = input_metrics(tmp_path, logs, "arrays", seed=3, global_batch=8, train_size=40)
    assert changed["matches_contract"] is False
    assert changed["fingerprints"][0] == metrics["fingerprints"][0]
    assert changed["fingerprints"][1] != metrics["fingerprints"][1]
    assert changed["indices"] is None  # 20 indices per device: over the limit of 10


@pytest.mark.parametrize("args,message", [
    (("torch-single", "--loader-workers", "2"), "--loader-workers needs --input native"),
    (("tf-single", "--input", "native", "--loader-workers", "2"),
     "--loader-workers 2 is not available for tf-single: tf.data has no worker processes"),
    (("torch-single", "--input", "native", "--loader-workers", "-1"),
     "--loader-workers must be 0 or more, got -1"),
    (("torch-single", "--input", "files"), "argument --input: invalid choice: 'files'"),
    (("torch-single", "--train-subset", "0"), "--train-subset must be positive, got 0"),
    (("torch-single", "--train-subset", "5000"), "--train-subset 5000 exceeds the 4096 "
     "training samples of synthetic"),
    (("torch-single", "--train-subset", "100", "--global-batch", "128"),
     "global batch 128 exceeds the 100 training rows of --dataset synthetic"),
    (("torch-single", "--input", "native", "--profile"), "--profile splits the fp32 eager "
     "step into phases; it cannot be combined with --input"),
    (("torch-single", "--model", "gpt", "--target", "1.4"), "--target 1.4 is below the "
     "language's floor for loss (1.451): no model can reach it"),
    (("torch-single", "--model", "gpt", "--target", "4.2", "--target-metric", "perplexity"),
     "--target 4.2 is below the language's floor for perplexity (4.265): no model can reach "
     "it"),
])
def test_bad_input_options_are_refused_before_anything_starts(tmp_path, args, message):
    out = tmp_path / "runs"
    done = parbench("run", *args, "--steps", "2", "--out", str(out), timeout=60)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr.strip().splitlines()[-1], done.stderr
    assert not out.exists() or not list(out.iterdir())


@needs("torch")
@pytest.mark.slow
def test_the_arrays_feed_on_an_uneven_dataset_is_the_contract_row_of_the_porting_doc(tmp_path):
    rec = run_ok(tmp_path, "torch-ddp", "--launcher", "spawn", "--devices", "2",
                 *UNEVEN_INPUT, *FEED_ONLY)
    fed = rec["metrics"]["input"]
    row = uneven_input_row("contract")
    assert fed["pipeline"] == "arrays" and fed["order"] == "contract"
    assert fed["matches_contract"] is True
    assert rec["steps"] == fed["steps_per_epoch"] == row["steps_per_epoch"]
    (epoch,) = fed["epochs"]
    assert (epoch["samples"], epoch["unique"], epoch["duplicated"], epoch["dropped"]) == (
        row["samples"], row["distinct"], row["duplicated"], row["dropped"])
    assert rec["modes"]["input"] == "arrays" and "modes" not in rec["variant"]
    assert check_record(rec) == []


def v4(base: dict, modes: Modes = Modes(), wait_share: float = 0.01) -> dict:
    """A schema-4 record: v3's fields, the input modes and metrics.input."""
    rec = {**v3(base, modes), "schema_version": 4}
    if rec["metrics"] is not None:
        rec["metrics"]["input"] = {
            "pipeline": modes.input, "description": "test", "train_size": 4096,
            "order": "contract" if modes.input == "arrays" else "loader",
            "steps_per_epoch": 32, "matches_contract": modes.input == "arrays",
            "epochs": [{"epoch": 0, "steps": 4, "complete": False, "samples": 512,
                        "unique": 512, "duplicated": 0, "dropped": None}],
            "fingerprints": ["0" * 64], "indices": None, "wait_s_mean": 0.001,
            "wait_share": wait_share}
    assert check_record(rec) == [], check_record(rec)
    return rec


def test_schema_4_needs_the_input_account():
    rec = v4(record("torch-single", "torch", 1, 0, 100.0))
    metrics = {k: v for k, v in rec["metrics"].items() if k != "input"}
    assert any("input" in p for p in check_record({**rec, "metrics": metrics}))
    modes = {k: v for k, v in rec["modes"].items() if k != "loader_workers"}
    assert any("loader_workers" in p for p in check_record({**rec, "modes": modes}))


def test_native_input_rows_are_their_own_rows_with_their_data_wait(tmp_path):
    native = Modes(input="native")
    records = [v4(record("torch-single", "torch", 1, 0, 100.0), wait_share=0.02),
               v4(record("torch-single", "torch", 1, 0, 80.0), native, wait_share=0.25),
               v4(record("torch-ddp", "torch", 2, 0, 120.0, launcher="torchrun"), native,
                  wait_share=0.3)]
    for i, rec in enumerate(records):
        (tmp_path / f"{i}.json").write_text(json.dumps(rec))
    done = parbench("report", str(tmp_path), timeout=120)
    assert done.returncode == 0, done.stderr
    performance = next(rows for (_, caption), rows in markdown_tables(done.stdout).items()
                       if caption == "Performance")
    cells = {(r["backend"], r["input"]): (r["data wait %"], r["scaling eff."])
             for r in performance}
    # the native x2 row's reference is the native single row: 120 / (2 x 80)
    assert cells == {("torch-single", "arrays"): ("2", "1"),
                     ("torch-single", "native"): ("25", "1"),
                     ("torch-ddp", "native"): ("30", "0.75")}
    assert "loader workers 0" in done.stdout  # the same in every row: said once


def test_a_report_of_records_without_the_input_account_has_no_wait_column(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps(v3(record("torch-single", "torch", 1, 0, 9.0))))
    done = parbench("report", str(tmp_path), timeout=120)
    assert done.returncode == 0, done.stderr
    performance = next(rows for (_, caption), rows in markdown_tables(done.stdout).items()
                       if caption == "Performance")
    assert "data wait %" not in performance[0] and "input arrays" in done.stdout
