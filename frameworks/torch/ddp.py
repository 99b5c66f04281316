"""torch-ddp: ``DistributedDataParallel``, one process per device.

Launched by torchrun (reads RANK / WORLD_SIZE / MASTER_ADDR from the environment it sets) or
by ``torch.multiprocessing.spawn`` (ranks passed in, rendezvous through a file). gloo on CPU,
NCCL on CUDA. Each process feeds only its contiguous part of every global batch; the loss is
the mean over that part and DDP averages gradients across processes during backward, which
equals the gradient of the global-batch mean because all parts have the same size.
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager
from datetime import timedelta
from functools import partial

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from parbench.contract.data import Dataset
from parbench.run.feeds import Feed
from parbench.run.job import Job
from parbench.run.loop import run_worker
from parbench.run.process import die_with_parent, exit_finished, watch_spawned

from . import runtime
from .input import distributed_feed
from .strategy import TorchStrategy

# A dead peer must surface as an error, not a 30-minute gloo wait (the harness has its own
# timeout too; this one bounds collectives inside a live run).
COLLECTIVE_TIMEOUT = timedelta(minutes=5)


class DistributedDataParallelStrategy(TorchStrategy):
    # --- setup: threads and seed (TorchStrategy), then one process group, one device per
    # process
    def __init__(self, job: Job, rank: int, init_method: str):
        # the rank torchrun or mp.spawn gave this process, and where the ranks meet
        self.launched_rank, self.init_method = rank, init_method
        super().__init__(job)

    def setup_devices(self, job: Job) -> list[torch.device]:
        cuda = torch.cuda.is_available()
        dist.init_process_group("nccl" if cuda else "gloo", init_method=self.init_method,
                                rank=self.launched_rank, world_size=job.world_size,
                                timeout=COLLECTIVE_TIMEOUT)
        local_rank = self.launched_rank - job.first_rank  # a node numbers its own GPUs
        device = torch.device(f"cuda:{local_rank}" if cuda else "cpu")
        if cuda:
            torch.cuda.set_device(device)
        return [device]

    # --- model: every rank loads the same canonical weights (TorchStrategy); DDP also
    # broadcasts rank 0's. --sync-bn converts BatchNorm before wrapping (CUDA only: refused on
    # CPU by config); --compile compiles DDP(module): it traces only because our models are
    # nn.Module subclasses (a bare nn.Sequential under DDP runs eagerly)
    def convert_module(self, module: nn.Module) -> nn.Module:
        if self.modes.sync_bn:  # keeps momentum, eps, weights and statistics; same names
            return nn.SyncBatchNorm.convert_sync_batchnorm(module)
        return module

    def wrap(self, module: nn.Module) -> nn.Module:
        cuda = self.device.type == "cuda"
        self.ddp = DDP(module, device_ids=[self.device.index] if cuda else None)  # no_sync: step
        return torch.compile(self.ddp) if self.modes.compile else self.ddp

    # --- data shard: this rank's contiguous part of each global batch (parbench.contract.batches)
    def data_shard(self, job: Job) -> tuple[int, int]:
        return dist.get_rank(), job.world_size

    # --- input: --input native: a DataLoader per process over the per-device batch; its
    # DistributedSampler shards one seeded permutation per epoch (set_epoch: see input.py)
    def native_feed(self, job: Job, data: Dataset) -> Feed:
        return distributed_feed(job, data, self.device, self.rank)

    # --- step: gradients are all-reduced (averaged) inside backward(); with --grad-accum, only
    # in the last micro-batch's backward (runtime.Step enters DDP's no_sync around the others);
    # --clip-grad-norm clips after that backward, so every rank takes the norm of the same
    # averaged gradient
    def hold_gradients(self) -> AbstractContextManager:
        return self.ddp.no_sync()

    # --- eval: each rank scores its part of the test set (TorchStrategy's evaluate, on the
    # bare module), then the counts are summed
    def all_reduce_sum(self, values: np.ndarray) -> np.ndarray:
        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor.cpu().numpy()

    def describe(self) -> dict:
        return runtime.describe(self.devices, process_group=dist.get_backend())

    # --- teardown: a finished rank leaves the process group with its peers. A failed one must
    # not: destroying an NCCL group is collective, and its peers may be blocked in a collective
    # this rank will never join (pytorch/torchtitan#1342); abort() drops the group's pending
    # work and connections instead, waiting for no peer (measured on gloo)
    def teardown(self, failed: bool) -> None:
        if failed:
            dist.group.WORLD.abort()
        else:
            dist.destroy_process_group()


def _train(rank: int, job: Job, init_method: str) -> None:
    run_worker(job, partial(DistributedDataParallelStrategy, rank=rank, init_method=init_method))


def _spawned(rank: int, job: Job, init_method: str) -> None:
    die_with_parent()  # mp.spawn's children would outlive a killed parent
    _train(rank, job, init_method)
    exit_finished()  # a finished rank must not die in interpreter finalization


def main(job: Job) -> None:
    if job.launcher == "torchrun":
        _train(int(os.environ["RANK"]), job, "env://")
    else:
        # The rendezvous file must not exist beforehand; the job folder is fresh per run.
        rendezvous = f"file://{job.path / 'rendezvous'}"
        spawned = mp.spawn(_spawned, args=(job, rendezvous), nprocs=job.world_size, join=False)
        watch_spawned(spawned.processes, job.path)  # says which rank died first, and how
        while not spawned.join():  # stops the others and raises if a rank failed
            pass
