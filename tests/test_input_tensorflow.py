"""--input native on the TensorFlow backends: the tf.data pipeline's per-replica samples, read
from the record's index lists, are exactly what TF's own shuffle and the pipeline's sharding
rule give (recomputed here from a bare ``tf.data`` shuffle, in a subprocess: no framework is
imported into pytest), every epoch covers the training set once, the uneven dataset's figures
are the porting doc's, and fit records what it was fed, with --input arrays too.

Each TensorFlow process spends ~6 s importing TensorFlow: the runs of a lane share one set,
two at a time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from conftest import FEED_ONLY, UNEVEN_INPUT, needs, run_ok, uneven_input_row

pytestmark = needs("tensorflow")

LANES = 2
SEED = 0  # parbench's default --seed: the pipeline's shuffle seed
TWO = ("--devices", "2")
NATIVE = ("--input", "native", *FEED_ONLY)
# runs without a second process; MultiWorker's (a process per worker) are the slow lane's
FAST_RUNS = {
    "mirrored-epoch": ("tf-mirrored", (*TWO, *NATIVE, "--epochs", "1")),
    "uneven-tf-single": ("tf-single", (*NATIVE, *UNEVEN_INPUT)),
    "uneven-tf-mirrored": ("tf-mirrored", (*TWO, *NATIVE, *UNEVEN_INPUT)),
    "uneven-tf-mirrored-keras": ("tf-mirrored-keras", (*TWO, *NATIVE, *UNEVEN_INPUT)),
    "keras-arrays": ("tf-mirrored-keras", (*TWO, *UNEVEN_INPUT, *FEED_ONLY)),
}
SLOW_RUNS = {
    "multiworker-two-epochs": ("tf-multiworker", (*TWO, *NATIVE, "--epochs", "2")),
    "uneven-tf-multiworker": ("tf-multiworker", (*TWO, *NATIVE, *UNEVEN_INPUT)),
}
# The bare tf.data shuffle, each epoch one repeat of it: the order every pipeline starts from.
PERMUTATIONS = """
import json, sys
import numpy as np, tensorflow as tf
n, seed, epochs, out = json.loads(sys.argv[1])
order = tf.data.Dataset.range(n).shuffle(n, seed=seed, reshuffle_each_iteration=True)
np.save(out, np.fromiter(order.repeat(epochs).as_numpy_iterator(), np.int64).reshape(epochs, n))
"""


def _train_all(folder: Path, runs: dict) -> dict[str, dict]:
    def train(name: str) -> dict:
        backend, options = runs[name]
        return run_ok(folder / name, backend, *options)

    for name in runs:
        (folder / name).mkdir()
    with ThreadPoolExecutor(LANES) as pool:
        return dict(zip(runs, pool.map(train, list(runs))))


@pytest.fixture(scope="module")
def fast(tmp_path_factory) -> dict[str, dict]:
    return _train_all(tmp_path_factory.mktemp("input"), FAST_RUNS)


@pytest.fixture(scope="module")
def slow(tmp_path_factory) -> dict[str, dict]:
    return _train_all(tmp_path_factory.mktemp("input-slow"), SLOW_RUNS)


@pytest.fixture(scope="module")
def shuffled(tmp_path_factory):
    """shuffled(n, epochs) -> epochs x n: tf.data's shuffle of range(n) with the run's seed."""
    folder, cache = tmp_path_factory.mktemp("shuffle"), {}

    def orders(n: int, epochs: int) -> np.ndarray:
        if (n, epochs) not in cache:
            out = folder / f"{n}-{epochs}.npy"
            env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
            done = subprocess.run([sys.executable, "-c", PERMUTATIONS,
                                   json.dumps([n, SEED, epochs, str(out)])],
                                  capture_output=True, text=True, env=env, timeout=300)
            assert done.returncode == 0, done.stderr[-3000:]
            cache[n, epochs] = np.load(out)
        return cache[n, epochs]

    return orders


def expected_indices(order: np.ndarray, pipelines: int, local: int, rows: int) -> np.ndarray:
    """devices x steps x rows of one epoch, by the pipeline's rule: pipeline i keeps elements
    i, i + k, ... of the epoch's order, cuts them into batches of ``rows`` and deals a step's
    ``local`` consecutive batches to its replicas; every pipeline stops at the shortest's steps."""
    steps = len(order) // pipelines // rows // local
    parts = []
    for pipeline in range(pipelines):
        batches = order[pipeline::pipelines][:steps * local * rows].reshape(steps, local, rows)
        parts.append(batches.transpose(1, 0, 2))
    return np.concatenate(parts)


def indices_of(record: dict) -> np.ndarray:
    return np.array(record["metrics"]["input"]["indices"])


def account(record: dict) -> dict:
    """The record's figures in the porting doc table's terms (one epoch)."""
    fed = record["metrics"]["input"]
    (epoch,) = fed["epochs"]
    return {"devices": len(fed["indices"]), "steps_per_epoch": fed["steps_per_epoch"],
            "samples": epoch["samples"], "distinct": epoch["unique"],
            "duplicated": epoch["duplicated"], "dropped": epoch["dropped"]}


def assert_waits_reported(record: dict) -> None:
    """Every step waited a measurable time for its batch, and with one process the share is
    that wait over wait plus the step times (the record's train_s): the figures agree."""
    metrics = record["metrics"]
    fed = metrics["input"]
    assert fed["wait_s_mean"] > 0 and 0 < fed["wait_share"] < 1
    if len(metrics["peak_rss_mb"]) == 1:  # one process: its steps are the run's
        waited = fed["wait_s_mean"] * record["steps"]
        assert fed["wait_share"] == pytest.approx(waited / (waited + metrics["train_s"]))


@pytest.mark.slow
def test_two_replicas_take_consecutive_batches_of_one_shuffle(fast, shuffled):
    record = fast["mirrored-epoch"]
    fed = record["metrics"]["input"]
    assert fed["pipeline"] == "native" and fed["order"] == "loader"
    assert not fed["matches_contract"]
    assert "distribute_datasets_from_function" in fed["description"]
    assert "seed=0" in fed["description"] and "drop_remainder=True" in fed["description"]
    assert fed["epochs"] == [{"epoch": 0, "steps": 32, "complete": True, "samples": 4096,
                              "unique": 4096, "duplicated": 0, "dropped": 0}]
    indices = indices_of(record)  # devices x steps x rows
    assert np.array_equal(np.sort(indices.ravel()), np.arange(4096))  # each sample once
    # replica r of step t: batch 2t + r of the pipeline's one shuffled order
    (order,) = shuffled(4096, 1)
    assert np.array_equal(indices, expected_indices(order, pipelines=1, local=2, rows=64))
    assert_waits_reported(record)


@pytest.mark.slow
def test_workers_shard_one_shuffle_and_reshuffle_each_epoch(slow, shuffled):
    record = slow["multiworker-two-epochs"]
    fed = record["metrics"]["input"]
    assert fed["order"] == "loader" and not fed["matches_contract"]
    assert [(e["steps"], e["samples"], e["unique"], e["dropped"]) for e in fed["epochs"]] == (
        [(32, 4096, 4096, 0)] * 2)
    indices = indices_of(record)  # workers x 64 steps x rows
    orders = shuffled(4096, 2)
    for epoch in range(2):
        steps = indices[:, 32 * epoch:32 * (epoch + 1)]
        # worker w: elements w, w + 2, ... of the epoch's order (one seed on both workers)
        assert np.array_equal(steps, expected_indices(orders[epoch], pipelines=2, local=1,
                                                      rows=64)), epoch
    # reshuffle_each_iteration: each worker's samples differ from one epoch to the next
    for worker in indices:
        assert set(worker[:32].ravel()) != set(worker[32:].ravel())
    assert_waits_reported(record)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["tf-single", "tf-mirrored", "tf-mirrored-keras",
                                     "tf-multiworker"])
def test_uneven_dataset_account_is_the_porting_docs(request, shuffled, backend):
    runs = request.getfixturevalue("slow" if backend == "tf-multiworker" else "fast")
    record = runs[f"uneven-{backend}"]
    assert account(record) == uneven_input_row(backend)
    # the tail each pipeline cannot fill is dropped, every step keeps the fixed batch: MultiWorker
    # shards 2048 and 2047 rows, both workers stop at the shorter one's 63 steps
    replicas = 1 if backend == "tf-single" else 2
    pipelines = 2 if backend == "tf-multiworker" else 1
    # fit first takes one batch to build the model (Keras' _maybe_symbolic_build), from an
    # iterator it then drops: that used up the shuffle's first order, its training starts on
    # the second
    first = 1 if backend == "tf-mirrored-keras" else 0
    order = shuffled(4095, 2)[first]
    assert np.array_equal(indices_of(record), expected_indices(
        order, pipelines, replicas // pipelines, 64 // replicas))
    assert_waits_reported(record)


@pytest.mark.slow
def test_keras_fit_records_the_contract_it_was_fed(fast):
    """--input arrays through fit: the indices come back from the replicas' train steps, and
    they are the contract's shards."""
    record = fast["keras-arrays"]
    fed = record["metrics"]["input"]
    assert fed["pipeline"] == "arrays" and fed["order"] == "contract"
    assert fed["matches_contract"]
    assert account(record) == uneven_input_row("contract")
    assert_waits_reported(record)
