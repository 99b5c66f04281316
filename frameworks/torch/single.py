"""torch-single: one process, one device. The baseline every parallel strategy must match."""

from __future__ import annotations

import numpy as np
import torch

from parbench.contract.data import Dataset
from parbench.contract.weights import load_weights
from parbench.run.feeds import Feed
from parbench.run.job import Job
from parbench.run.loop import run_worker

from . import runtime
from .input import random_feed
from .model import build_model


class SingleDevice(runtime.TorchStrategy):
    # --- setup: threads and the one device
    def __init__(self, job: Job):
        runtime.setup_threads(job)
        self.device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
        self.devices = [self.device]
        runtime.reset_peak_memory(self.devices)
        # --- model: canonical weights, the run's optimizer (SGD or AdamW, the shared rules);
        # --compile compiles the module
        weights = load_weights(job.weights_path)
        self.module = build_model(job.spec, weights).to(self.device)
        self.modes = job.modes
        self.model = torch.compile(self.module) if self.modes.compile else self.module
        self.optimizer = runtime.optimizer(self.module, job.optimizer_spec, job.spec)
        self.step = runtime.Step(self.model, self.module, self.optimizer, self.device,
                                 self.modes, clip=job.optimizer_spec.clip_grad_norm)
        # --- data shard: the one process reads every row of each global batch
        self.rank, self.num_processes = 0, 1

    # --- input: --input native: a DataLoader over the global batch, RandomSampler seeded from
    # job.seed (see input.py)
    def native_feed(self, job: Job, data: Dataset) -> Feed:
        return random_feed(job, data, self.device, devices=1)

    # --- step: autocast, loss scaling, micro-batches and clipping live in runtime.Step
    def train_step(self, x: runtime.Rows, y: runtime.Rows, lr: float) -> float:
        return self.step(x, y, lr)

    # --- eval: the eager module, in the run's precision (only training steps are compiled)
    def evaluate(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
        return runtime.evaluate(self.module, x, y, self.device, self.modes.precision)


def main(job: Job) -> None:
    run_worker(job, SingleDevice)
