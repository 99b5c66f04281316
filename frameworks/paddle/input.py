"""--input native for Paddle: ``paddle.io.Dataset`` + a batch sampler + ``paddle.io.DataLoader``.

* paddle-single: ``BatchSampler(shuffle=True)``, whose ``RandomSampler`` draws each epoch's
  order with ``np.random.choice`` on numpy's *global* RNG (``paddle.seed`` does not reach it),
  so the feed seeds that RNG with the run's seed, as Paddle's own examples do.
* paddle-spawn / paddle-launch: ``DistributedBatchSampler``. Read from Paddle 3.3.1's source
  (paddle/io/dataloader/batch_sampler.py): it pads the row list to a multiple of the replicas
  by repeating its first rows (before shuffling), shuffles with
  ``np.random.RandomState(epoch)``: the epoch number is the whole seed, the run's seed cannot
  change it, and cuts the shuffled list into global batches of replicas x batch_size rows,
  each replica taking its contiguous block (the contract's rule, parbench.contract.batches), not every
  replica-th row as torch's DistributedSampler does.

Without a DistributedBatchSampler every process of spawn or launch reads the whole dataset:
nothing warns (tests/test_input_paddle.py shows it).
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from itertools import count, islice

import numpy as np
import paddle
from paddle.io import BatchSampler, DataLoader, DistributedBatchSampler

from parbench.contract.data import Dataset
from parbench.run.feeds import LOADER, Batch
from parbench.run.job import Job


class IndexedRows(paddle.io.Dataset):
    """Training row ``index`` as (x, y, index): the index is collated and carried (through
    worker processes too) with its sample, so the record shows what the loader really fed. An
    image row is (float32 image, int64 class), a token row (int64 ids [T], int64 next tokens
    [T]), a detection row (float32 image, float32 maps [7, H/4, W/4]): the default collate
    stacks each into the batch the model and the task take."""

    def __init__(self, data: Dataset):
        self.x, self.y = data.x_train, data.y_train  # memory-mapped: workers share one copy

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.int64 | np.ndarray, int]:
        return np.asarray(self.x[index]), self.y[index], index

    def __len__(self) -> int:
        return len(self.y)


class LoaderFeed:
    """A parbench Feed (parbench.run.feeds) over a DataLoader: its tensors go to the step as they
    come, the indices as numpy. Each epoch of a DistributedBatchSampler starts with
    ``set_epoch(epoch)``: its shuffle seed is the epoch counter, which otherwise counts the
    iterators started so far."""

    order = LOADER

    def __init__(self, loader: DataLoader, sampler: BatchSampler, seed: int, description: str):
        self.loader, self.sampler, self.seed = loader, sampler, seed
        self.description = description
        # drop_last: the loader's length is its exact batch count, the same on every rank
        self.steps_per_epoch = len(loader)
        if not self.steps_per_epoch:
            raise ValueError(f"{description}: fewer training rows than one batch")

    def batches(self, total_steps: int) -> Iterator[Batch]:
        # RandomSampler's order (single) and the loader's worker seeds come from numpy's
        # global RNG; DistributedBatchSampler ignores it (its seed is the epoch)
        np.random.seed(self.seed)
        yield from islice(self._epochs(), total_steps)

    def _epochs(self) -> Iterator[Batch]:
        for epoch in count():
            if isinstance(self.sampler, DistributedBatchSampler):
                self.sampler.set_epoch(epoch)
            yield from self._epoch(epoch)

    def _epoch(self, epoch: int) -> Iterator[Batch]:
        position = 0
        for position, (x, y, index) in enumerate(self.loader, start=1):
            rows = index.numpy().reshape(1, -1)  # one device per process
            yield Batch(x, y, rows, epoch, position == self.steps_per_epoch)
        if position != self.steps_per_epoch:  # an epoch_end mark would have been wrong
            raise RuntimeError(f"the loader gave {position} batches in epoch {epoch}, its "
                               f"length says {self.steps_per_epoch}")


def _loader(rows: IndexedRows, sampler: BatchSampler, workers: int) -> DataLoader:
    # workers > 0: worker processes collate into shared memory (/dev/shm); tensors come back
    # on the current device (the loader's buffered reader copies them to a GPU)
    return DataLoader(rows, batch_sampler=sampler, num_workers=workers)


def single_feed(job: Job, data: Dataset) -> LoaderFeed:
    """paddle-single: the whole global batch per step, in RandomSampler's order."""
    rows, workers = IndexedRows(data), job.modes.loader_workers
    # drop_last: a short last batch would be a step of another batch size (the comparison
    # fixes the global batch), so the tail of each epoch is not trained on
    sampler = BatchSampler(rows, shuffle=True, batch_size=job.global_batch, drop_last=True)
    description = (
        f"paddle.io.DataLoader(batch_sampler=BatchSampler(shuffle=True, "
        f"batch_size={job.global_batch}, drop_last=True), num_workers={workers}): "
        f"RandomSampler on numpy's global RNG, np.random.seed({job.seed}) once, a new "
        f"order each epoch" + _worker_note(workers, sampler_uses_numpy=True))
    return LoaderFeed(_loader(rows, sampler, workers), sampler, job.seed, description)


def distributed_feed(job: Job, data: Dataset, rank: int) -> LoaderFeed:
    """paddle-spawn / paddle-launch: this rank's block of each global batch, from
    DistributedBatchSampler (batch_size is per replica)."""
    rows, workers = IndexedRows(data), job.modes.loader_workers
    per_replica = job.global_batch // job.world_size
    # drop_last: every step keeps the run's global batch (the padding already gives every
    # rank the same row count, so the ranks' batch counts agree with or without it)
    sampler = DistributedBatchSampler(rows, batch_size=per_replica, num_replicas=job.world_size,
                                      rank=rank, shuffle=True, drop_last=True)
    description = (
        f"paddle.io.DataLoader(batch_sampler=DistributedBatchSampler(num_replicas="
        f"{job.world_size}, batch_size={per_replica} per replica, shuffle=True, "
        f"drop_last=True), num_workers={workers}): set_epoch(epoch) each epoch; the shuffle is "
        f"np.random.RandomState(epoch), the run's seed ({job.seed}) does not change it; rows "
        f"padded to a multiple of {job.world_size} by repeating the first ones; each replica "
        f"takes its contiguous block of every global batch"
        + _worker_note(workers, sampler_uses_numpy=False))
    return LoaderFeed(_loader(rows, sampler, workers), sampler, job.seed, description)


def _worker_note(workers: int, sampler_uses_numpy: bool) -> str:
    """What worker processes change: how they start (paddle.distributed.spawn's children inherit
    the 'spawn' method, so each epoch's workers re-import Paddle: seconds per epoch) and, for
    RandomSampler, the order: each epoch's multiprocess iterator draws its workers' base seed
    from numpy's global RNG before the sampler draws the epoch's order from it."""
    if not workers:
        return ""
    note = (f"; workers started each epoch by multiprocessing's "
            f"'{multiprocessing.get_start_method()}' method")
    return note + ("; their base seed is drawn from that RNG first, so the order is not the one "
                   "num_workers=0 gives" if sampler_uses_numpy else "")
