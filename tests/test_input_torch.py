"""--input native on the torch backends (frameworks/torch/input.py), through the CLI: the
samples each device trained on, as the record shows them, against the samplers' own rules
recomputed here -- DistributedSampler's seeded permutation per epoch, padded and dealt out
rank by rank; RandomSampler's passes over its seeded generator -- and the uneven dataset's
account against the porting doc's table. torch's permutations come from a subprocess: no
framework is imported into pytest."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from conftest import FEED_ONLY, UNEVEN_INPUT, needs, run_ok, uneven_input_row

pytestmark = needs("torch")

NATIVE = ("--input", "native", *FEED_ONLY)
SMALL = ("--train-subset", "512", "--global-batch", "64")  # 8 steps per epoch: short runs


def torch_json(code: str) -> object:
    """The JSON value of a torch expression, evaluated in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", f"import json, torch\nprint(json.dumps({code}))"],
                          capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout)


def distributed_shards(n: int, world: int, seed: int, epoch: int, batch: int) -> np.ndarray:
    """DistributedSampler(shuffle=True, drop_last=False) then DataLoader(drop_last=True), from
    the rule: randperm(n) seeded seed + epoch, padded with its own head to a multiple of the
    world size, rank r takes every world-th index from r; devices x steps x batch."""
    order = np.array(torch_json(
        f"torch.randperm({n}, generator=torch.Generator().manual_seed({seed + epoch})).tolist()"))
    padded = np.concatenate([order, order[:-n % world]])  # up to a multiple of world
    per_rank = len(padded) // world
    steps = per_rank // batch
    return np.stack([padded[r::world][:steps * batch].reshape(steps, batch)
                     for r in range(world)])


def random_sampler_passes(n: int, seed: int, epochs: int) -> np.ndarray:
    """RandomSampler(generator seeded `seed`), one full pass per epoch: epochs x n."""
    return np.array(torch_json(
        f"[list(s) for g in [torch.Generator().manual_seed({seed})] "
        f"for s in [torch.utils.data.RandomSampler(range({n}), generator=g)] "
        f"for _ in range({epochs})]"))


def devices_steps(record: dict) -> np.ndarray:
    """metrics.input.indices as devices x steps x rows."""
    return np.array(record["metrics"]["input"]["indices"])


def by_epoch(record: dict) -> dict[int, np.ndarray]:
    """Each epoch's samples per device: epoch -> devices x steps x rows."""
    samples = devices_steps(record)
    steps = record["metrics"]["input"]["steps_per_epoch"]
    return {e: samples[:, e * steps:(e + 1) * steps]
            for e in range(samples.shape[1] // steps)}


def assert_loader_order(record: dict) -> None:
    native = record["metrics"]["input"]
    assert native["pipeline"] == "native" and native["order"] == "loader"
    assert native["matches_contract"] is False
    assert "DataLoader" in native["description"]


@pytest.mark.slow
def test_ddp_epoch_is_the_distributed_samplers_shards(tmp_path):
    """torchrun, 2 devices, the default 4096 rows: every sample exactly once in the epoch,
    device r's samples are DistributedSampler's rank r, in its order."""
    record = run_ok(tmp_path, "torch-ddp", "--devices", "2", *NATIVE, "--epochs", "1")
    native = record["metrics"]["input"]
    assert_loader_order(record)
    assert "DistributedSampler(num_replicas=2, rank=0, shuffle=True, seed=0" in \
        native["description"]
    samples = devices_steps(record)
    assert samples.shape == (2, 32, 64)  # 4096 / 2 ranks / 64 rows per device
    assert np.array_equal(samples, distributed_shards(4096, 2, 0, 0, 64))
    assert np.array_equal(np.sort(samples.ravel()), np.arange(4096))  # once each
    assert native["epochs"] == [{"epoch": 0, "steps": 32, "complete": True, "samples": 4096,
                                 "unique": 4096, "duplicated": 0, "dropped": 0}]


@pytest.mark.slow
@pytest.mark.parametrize("backend,extra", [("torch-single", ()), ("torch-ddp", ("--devices", "2"))])
def test_uneven_dataset_account_is_the_porting_docs_row(tmp_path, backend, extra):
    """4095 rows, global batch 64: the record's epoch account is the doc table's row, and the
    samples are the sampler's (DDP: its padding repeats the permutation's first index)."""
    record = run_ok(tmp_path, backend, *NATIVE, *UNEVEN_INPUT, *extra)
    native, row = record["metrics"]["input"], uneven_input_row(backend)
    (epoch,) = native["epochs"]
    assert record["world_size"] == row["devices"]
    assert native["steps_per_epoch"] == epoch["steps"] == row["steps_per_epoch"]
    assert (epoch["samples"], epoch["unique"], epoch["duplicated"], epoch["dropped"]) == (
        row["samples"], row["distinct"], row["duplicated"], row["dropped"])
    samples = devices_steps(record)
    if backend == "torch-ddp":
        expected = distributed_shards(4095, 2, 0, 0, 32)
        padding = expected[1, -1, -1]  # the last rank's last sample: the padded one
        assert list(samples.ravel()).count(padding) == 2
    else:
        expected = random_sampler_passes(4095, 0, 1)[0][:63 * 64].reshape(1, 63, 64)
    assert np.array_equal(samples, expected)


@pytest.mark.slow
def test_set_epoch_reshuffles_ddp_shards_with_spawn_and_workers(tmp_path):
    """mp.spawn, 2 loader workers per rank, 2 epochs: epoch 1's shards are the sampler's for
    seed + 1 (set_epoch), not epoch 0's again (what a loop without set_epoch trains on), each
    epoch covers the subset once, and the record reports the wait for data."""
    record = run_ok(tmp_path, "torch-ddp", "--devices", "2", "--launcher", "spawn", *NATIVE,
                    "--loader-workers", "2", *SMALL, "--epochs", "2")
    assert_loader_order(record)
    assert "num_workers=2, persistent_workers=True" in record["metrics"]["input"]["description"]
    epochs = by_epoch(record)
    assert sorted(epochs) == [0, 1]
    for epoch, samples in epochs.items():
        assert np.array_equal(samples, distributed_shards(512, 2, 0, epoch, 32))
        assert np.array_equal(np.sort(samples.ravel()), np.arange(512))
    for rank in range(2):  # each rank's set changes between epochs, not only its order
        assert set(epochs[0][rank].ravel()) != set(epochs[1][rank].ravel())
    assert_wait_reported(record)


def assert_wait_reported(record: dict) -> None:
    native = record["metrics"]["input"]
    assert native["wait_s_mean"] > 0 and 0 < native["wait_share"] < 1


@pytest.mark.slow
def test_loader_workers_keep_the_samplers_order(tmp_path):
    """torch-single, 2 epochs with 0 and with 2 workers: both are RandomSampler's two passes
    over its seeded generator (the feed ends every epoch as a for loop does, so prefetching
    workers do not advance the generator differently), and the wait is reported."""
    runs = {}
    for workers in (0, 2):
        (tmp_path / f"w{workers}").mkdir()
        runs[workers] = run_ok(tmp_path / f"w{workers}", "torch-single", *NATIVE, *SMALL,
                               "--epochs", "2", "--loader-workers", str(workers))
    passes = random_sampler_passes(512, 0, 2)
    for record in runs.values():
        assert_loader_order(record)
        epochs = by_epoch(record)
        for epoch, samples in epochs.items():
            assert np.array_equal(samples.ravel(), passes[epoch])
        assert_wait_reported(record)
    fingerprints = [r["metrics"]["input"]["fingerprints"] for r in runs.values()]
    assert fingerprints[0] == fingerprints[1]


@pytest.mark.slow
def test_dataparallel_loads_the_global_batch(tmp_path):
    """torch-dp on its one CPU device: one loader over the global batch, RandomSampler's."""
    record = run_ok(tmp_path, "torch-dp", "--devices", "1", *NATIVE, *SMALL, "--steps", "3")
    assert_loader_order(record)
    assert "batch_size=64" in record["metrics"]["input"]["description"]
    samples = devices_steps(record)
    assert np.array_equal(samples, random_sampler_passes(512, 0, 1)[0][:192].reshape(1, 3, 64))
