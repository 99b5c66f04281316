"""--input native for torch: ``Dataset`` + sampler + ``DataLoader``, the way torch code is
usually written, with the sample index travelling through the loader so the record shows what
the loader really fed.

* torch-single and torch-dp: one loader over the global batch, ``RandomSampler`` with its own
  ``torch.Generator`` seeded from ``job.seed`` (each pass over the sampler draws the next
  permutation from that generator: a new order every epoch, the same orders every run).
* torch-ddp: one loader per process over the per-device batch, ``DistributedSampler`` (shuffled,
  seeded from ``job.seed``): rank r takes every world-th index of one shared permutation, which
  is drawn from ``seed + epoch`` -- so ``set_epoch`` must be called before every epoch, or every
  epoch repeats epoch 0's order. When the dataset does not divide by the world size the sampler
  pads the permutation with its own first indices (duplicates) so every rank gets as many.

Batches are ``drop_last=True``: every step trains on the run's fixed batch (the global batch
splits into equal shards, and the contract's learning rate and loss mean assume that size), at
the cost of the epoch's tail.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, RandomSampler, Sampler

from parbench.contract.data import Dataset as Arrays
from parbench.run.feeds import LOADER, Batch
from parbench.run.job import Job


class IndexedRows(Dataset):
    """The training rows of parbench's data folder as (x, y, index) samples; the index is
    collated with the rows, so each batch says which samples it holds."""

    def __init__(self, data: Arrays, folder: Path):
        self.x, self.y, self.folder = data.x_train, data.y_train, folder  # memory-mapped

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        # np.array copies the row out of the read-only memory map (torch wants it writable);
        # a label is a class (0-d) or a language model's next tokens (one per position)
        return (torch.from_numpy(np.array(self.x[index])),
                torch.from_numpy(np.array(self.y[index])), index)

    def __getstate__(self) -> dict:
        # A loader worker started by spawn (the default inside mp.spawn's processes) receives
        # the dataset pickled: it gets the folder and maps the files again, instead of a copy
        # of every row per worker (a forked worker shares the parent's maps without this).
        return {"folder": self.folder}

    def __setstate__(self, state: dict) -> None:
        self.__init__(Arrays.load(state["folder"], ""), state["folder"])


def data_loader(rows: IndexedRows, sampler: Sampler, batch_size: int, workers: int,
                device: torch.device, seed: int) -> DataLoader:
    return DataLoader(
        rows, batch_size=batch_size, sampler=sampler,
        drop_last=True,  # every step has the run's fixed batch (see the module docstring)
        num_workers=workers,
        persistent_workers=workers > 0,  # no new worker processes at every epoch
        pin_memory=device.type == "cuda",  # page-locked host batches: async copies to the GPU
        # the loader draws its workers' base seed once per epoch: from its own generator, not
        # from torch's global one
        generator=torch.Generator().manual_seed(seed))


def loader_settings(loader: DataLoader) -> str:
    return (f"batch_size={loader.batch_size}, drop_last={loader.drop_last}, "
            f"num_workers={loader.num_workers}, persistent_workers={loader.persistent_workers}, "
            f"pin_memory={loader.pin_memory}")


class LoaderFeed:
    """A DataLoader as parbench's Feed: the loader's own epochs, its tensors as they are (x, y
    go straight into the step), the indices as numpy, one row per device this process drives
    (DataParallel scatters a batch into contiguous equal chunks)."""

    order = LOADER

    def __init__(self, loader: DataLoader, description: str, devices: int,
                 set_epoch: Callable[[int], None] | None = None):
        self.loader: DataLoader | None = loader
        self.description, self.devices, self.set_epoch = description, devices, set_epoch
        self.steps_per_epoch = len(loader)  # per process; DistributedSampler: equal on all ranks
        if self.steps_per_epoch == 0:  # drop_last leaves no batch: no epoch would ever end
            raise ValueError(f"the DataLoader has no full batch of {loader.batch_size} rows: "
                             f"its sampler gives {len(loader.sampler)} samples per epoch")

    def batches(self, total_steps: int) -> Iterator[Batch]:
        done, epoch = 0, 0
        while True:
            loaded = self._epoch(epoch)
            for step in range(self.steps_per_epoch):
                x, y, indices = next(loaded)
                done += 1
                if done == total_steps:
                    # the run's last batch is in hand: dropping the loader and its iterator
                    # shuts the workers down now (the worker process ends with os._exit, which
                    # would leave persistent workers to notice their parent's death)
                    loaded = self.loader = None
                last = step == self.steps_per_epoch - 1
                yield Batch(x, y, indices.numpy().reshape(self.devices, -1), epoch, last)
                if done == total_steps:
                    return
            self._finish(loaded)
            epoch += 1

    @staticmethod
    def _finish(loaded: Iterator) -> None:
        """End the epoch as a ``for`` loop over the loader does: the sampler runs to its end.
        That matters: RandomSampler draws one more permutation there (for its empty tail), and
        loader workers prefetching ahead get there anyway, so stopping short would make the
        next epoch's order depend on --loader-workers."""
        if next(loaded, None) is not None:
            raise RuntimeError("the DataLoader yielded more batches than its len()")

    def _epoch(self, epoch: int) -> Iterator:
        if self.set_epoch:  # before iter(): the sampler's permutation is drawn there
            self.set_epoch(epoch)
        return iter(self.loader)


def random_feed(job: Job, data: Arrays, device: torch.device, devices: int) -> LoaderFeed:
    """torch-single and torch-dp: the one process loads each global batch."""
    rows = IndexedRows(data, job.data_path)
    sampler = RandomSampler(rows, generator=torch.Generator().manual_seed(job.seed))
    workers = job.modes.loader_workers
    loader = data_loader(rows, sampler, job.global_batch, workers, device, job.seed)
    description = (f"torch DataLoader(sampler=RandomSampler(generator=torch.Generator()"
                   f".manual_seed({job.seed})), {loader_settings(loader)}): each epoch's "
                   f"permutation drawn from the sampler's generator")
    return LoaderFeed(loader, description, devices)


def distributed_feed(job: Job, data: Arrays, device: torch.device, rank: int) -> LoaderFeed:
    """torch-ddp: this rank's shard of each epoch, one device's batch per step."""
    rows = IndexedRows(data, job.data_path)
    sampler = DistributedSampler(rows, num_replicas=job.world_size, rank=rank, shuffle=True,
                                 seed=job.seed, drop_last=False)  # the default: pads, see above
    workers = job.modes.loader_workers
    loader = data_loader(rows, sampler, job.global_batch // job.world_size, workers, device,
                         job.seed)
    description = (f"torch DataLoader(sampler=DistributedSampler(num_replicas={job.world_size}, "
                   f"rank={rank}, shuffle=True, seed={job.seed}, drop_last=False), "
                   f"{loader_settings(loader)}); set_epoch(epoch) before each epoch")
    return LoaderFeed(loader, description, 1, sampler.set_epoch)
