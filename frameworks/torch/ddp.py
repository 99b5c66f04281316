"""torch-ddp: ``DistributedDataParallel``, one process per device.

The process group, each rank's part of the global batch, the sum across processes and the
launchers (torchrun, spawn) are process_group.py's, shared with torch-fsdp. DDP keeps a whole
copy of the parameters, gradients and optimizer state on every rank and averages the gradients
across processes during backward (one all-reduce of every gradient per step, in buckets that
overlap the backward).
"""

from __future__ import annotations

from contextlib import AbstractContextManager

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from parbench.run.job import Job

from .process_group import ProcessGroupStrategy, launch


class DistributedDataParallelStrategy(ProcessGroupStrategy):
    # --- setup: threads and seed, then one process group, one device per process
    # (ProcessGroupStrategy)

    # --- model: every rank loads the same canonical weights (TorchStrategy); DDP also
    # broadcasts rank 0's. --sync-bn converts BatchNorm before wrapping (ProcessGroupStrategy);
    # --compile compiles DDP(module): it traces only because our models are nn.Module
    # subclasses (a bare nn.Sequential under DDP runs eagerly)
    def wrap(self, module: nn.Module) -> nn.Module:
        cuda = self.device.type == "cuda"
        self.ddp = DDP(module, device_ids=[self.device.index] if cuda else None)  # no_sync: step
        return torch.compile(self.ddp) if self.modes.compile else self.ddp

    # --- data shard: this rank's contiguous part of each global batch (ProcessGroupStrategy)

    # --- step: gradients are all-reduced (averaged) inside backward(); with --grad-accum, only
    # in the last micro-batch's backward (runtime.Step enters DDP's no_sync around the others);
    # --clip-grad-norm clips after that backward, so every rank takes the norm of the same
    # averaged gradient
    def hold_gradients(self) -> AbstractContextManager:
        return self.ddp.no_sync()

    # --- eval: each rank scores its part of the test set on the bare module, then the counts
    # are summed (ProcessGroupStrategy)

    # --- teardown: the process group is left, or aborted by a failed rank (ProcessGroupStrategy)


def main(job: Job) -> None:
    launch(job, DistributedDataParallelStrategy)
