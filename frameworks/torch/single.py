"""torch-single: one process, one device. The baseline every parallel strategy must match."""

from __future__ import annotations

import torch
from torch import nn

from parbench.contract.data import Dataset
from parbench.run.feeds import Feed
from parbench.run.job import Job
from parbench.run.loop import run_worker

from .input import random_feed
from .strategy import TorchStrategy


class SingleDevice(TorchStrategy):
    # --- setup: threads and seed (TorchStrategy), then the one device
    def setup_devices(self, job: Job) -> list[torch.device]:
        return [torch.device("cuda:0" if torch.cuda.is_available() else "cpu")]

    # --- model: canonical weights, the run's optimizer (SGD or AdamW, the shared rules), built
    # by TorchStrategy; --compile compiles the module
    def wrap(self, module: nn.Module) -> nn.Module:
        return torch.compile(module) if self.modes.compile else module

    # --- data shard: the one process reads every row of each global batch (TorchStrategy's
    # rank 0 of 1)

    # --- input: --input native: a DataLoader over the global batch, RandomSampler seeded from
    # job.seed (see input.py)
    def native_feed(self, job: Job, data: Dataset) -> Feed:
        return random_feed(job, data, self.device, devices=1)

    # --- step: TorchStrategy's runtime.Step: autocast, loss scaling, micro-batches and clipping;
    # no gradient communication

    # --- eval: TorchStrategy's: the eager module, in the run's precision (only training steps
    # are compiled)


def main(job: Job) -> None:
    run_worker(job, SingleDevice)
