"""What each process trains on, step by step, and the proof of what it was fed.

``--input arrays`` (the default): the loop slices the contract's shards out of the training
arrays itself (``ArrayFeed``, see parbench.contract.batches), so every framework trains on the
same rows in the same order. ``--input native``: the strategy builds its framework's own loader
(``Strategy.native_feed``): torch ``DataLoader`` with a ``DistributedSampler``, ``tf.data``
through ``distribute_datasets_from_function``, Paddle's ``DistributedBatchSampler``. Those
shuffle with their own generators, so the order is the loader's, not the contract's; what
must still hold is that each epoch covers the training set, and the record shows how far it
does (see parbench.results.samples).

Either way every batch carries the training-set indices of its rows, per device, and the loop
keeps them with the time the step waited for its batch (``FeedLog``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from parbench.contract.batches import schedule, shard_slice, steps_per_epoch
from parbench.contract.data import Dataset

from .job import Job

CONTRACT, LOADER = "contract", "loader"  # Feed.order: whose shuffle decides the rows


@dataclass
class Batch:
    x: Any  # what the strategy's train_step takes: numpy rows, or the loader's own tensors
    y: Any
    indices: np.ndarray  # training-set rows, shape (devices this process drives, rows each)
    epoch: int  # the feed's epoch (the loader's own for --input native)
    epoch_end: bool  # the last batch of that epoch


class Feed(Protocol):
    description: str  # what produced the batches, for the record
    order: str  # CONTRACT or LOADER
    steps_per_epoch: int  # batches in one of the feed's epochs

    def batches(self, total_steps: int) -> Iterator[Batch]:
        """Exactly ``total_steps`` batches for this process, epoch after epoch."""


class ArrayFeed:
    """The contract: global batch t of epoch e is rows [t*B, (t+1)*B) of the epoch's
    permutation, this process takes its contiguous part, each of its devices a contiguous part
    of that (how Mirrored and DataParallel split a process's rows)."""

    description = "parbench arrays: the contract's shards (parbench.contract.batches)"
    order = CONTRACT

    def __init__(self, job: Job, data: Dataset, rank: int, num_processes: int):
        self.data, self.seed, self.global_batch = data, job.seed, job.global_batch
        self.rows = shard_slice(job.global_batch, num_processes, rank)
        self.devices = job.world_size // num_processes
        self.steps_per_epoch = steps_per_epoch(len(data.y_train), job.global_batch)

    def batches(self, total_steps: int) -> Iterator[Batch]:
        n = len(self.data.y_train)
        for step in schedule(self.seed, n, self.global_batch, total_steps):
            mine = step.indices[self.rows]
            yield Batch(np.asarray(self.data.x_train[mine]), np.asarray(self.data.y_train[mine]),
                        mine.reshape(self.devices, -1), step.epoch, step.epoch_end)


def run_length(job: Job, feed: Feed) -> int:
    """Steps of the run: --steps as given; --epochs counts the feed's own epochs, so a native
    loader's epoch (torch's DistributedSampler pads it, tf.data may drop a tail) is whole."""
    return job.epochs * feed.steps_per_epoch if job.epochs else job.total_steps


@dataclass
class FeedLog:
    """Per step: the indices each of this process's devices trained on, the feed's epoch, and
    the seconds the loop waited for the batch. The indices go to ``samples-rank<r>.npy`` (one
    int64 array, steps x devices x rows), the rest into the rank's log."""

    feed: Feed
    indices: list[np.ndarray] = field(default_factory=list)
    epochs: list[int] = field(default_factory=list)
    epoch_ends: list[bool] = field(default_factory=list)
    wait_s: list[float] = field(default_factory=list)

    def add(self, batch: Batch, wait_s: float) -> None:
        self.indices.append(np.asarray(batch.indices, dtype=np.int64))
        self.epochs.append(int(batch.epoch))
        self.epoch_ends.append(bool(batch.epoch_end))
        self.wait_s.append(wait_s)

    def write(self, folder: Path, rank: int) -> dict:
        """Save the indices; return the summary the rank's log carries."""
        target = folder / samples_file(rank)
        with open(target.with_suffix(".tmp"), "wb") as handle:
            np.save(handle, np.stack(self.indices) if self.indices else np.zeros((0, 0, 0)))
        target.with_suffix(".tmp").rename(target)
        return {"description": self.feed.description, "order": self.feed.order,
                "steps_per_epoch": self.feed.steps_per_epoch, "epochs": self.epochs,
                "epoch_ends": self.epoch_ends, "wait_s": self.wait_s}


def samples_file(rank: int) -> str:
    return f"samples-rank{rank}.npy"
