"""What the torch strategies with one process per device share: joining the process group,
this rank's part of each global batch, the sum across processes, their release, and the two
launchers (torchrun, torch.multiprocessing.spawn). torch-ddp (ddp.py) and torch-fsdp (fsdp.py)
differ only in how they wrap the module and pause gradient communication.

Launched by torchrun (reads RANK / WORLD_SIZE / MASTER_ADDR from the environment it sets) or
by ``torch.multiprocessing.spawn`` (ranks passed in, rendezvous through a file). gloo on CPU,
NCCL on CUDA. Each process feeds only its contiguous part of every global batch; the loss is
the mean over that part, and the wrapper averages gradients across processes during backward,
which equals the gradient of the global-batch mean because all parts have the same size.
"""

from __future__ import annotations

import os
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

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


class ProcessGroupStrategy(TorchStrategy):
    """A TorchStrategy with one process per device, joined in the default process group."""

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

    # --- model: --sync-bn converts BatchNorm before the module is wrapped (CUDA only:
    # refused on CPU by config)
    def convert_module(self, module: nn.Module) -> nn.Module:
        if self.modes.sync_bn:  # keeps momentum, eps, weights and statistics; same names
            return nn.SyncBatchNorm.convert_sync_batchnorm(module)
        return module

    # --- data shard: this rank's contiguous part of each global batch (parbench.contract.batches)
    def data_shard(self, job: Job) -> tuple[int, int]:
        return dist.get_rank(), job.world_size

    # --- input: --input native: a DataLoader per process over the per-device batch; its
    # DistributedSampler shards one seeded permutation per epoch (set_epoch: see input.py)
    def native_feed(self, job: Job, data: Dataset) -> Feed:
        return distributed_feed(job, data, self.device, self.rank)

    # --- eval: each rank scores its part of the test set (TorchStrategy's evaluate), then
    # the counts are summed
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


def _spawned(rank: int, job: Job, init_method: str, strategy: type[ProcessGroupStrategy]) -> None:
    die_with_parent()  # mp.spawn's children would outlive a killed parent
    run_worker(job, lambda job: strategy(job, rank=rank, init_method=init_method))
    exit_finished()  # a finished rank must not die in interpreter finalization


def launch(job: Job, strategy: type[ProcessGroupStrategy]) -> None:
    """Run ``strategy`` on this process's rank (torchrun started it) or on every rank of this
    machine (spawn)."""
    if job.launcher == "torchrun":
        rank = int(os.environ["RANK"])
        run_worker(job, lambda job: strategy(job, rank=rank, init_method="env://"))
        return
    # The rendezvous file must not exist beforehand; the job folder is fresh per run.
    rendezvous = f"file://{job.path / 'rendezvous'}"
    spawned = mp.spawn(_spawned, args=(job, rendezvous, strategy), nprocs=job.world_size,
                       join=False)
    watch_spawned(spawned.processes, job.path)  # says which rank died first, and how
    while not spawned.join():  # stops the others and raises if a rank failed
        pass
