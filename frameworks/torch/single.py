"""torch-single: one process, one device. The baseline every parallel strategy must match."""

from __future__ import annotations

import numpy as np
import torch

from parbench.job import Job
from parbench.loop import run_worker
from parbench.weights import load_weights

from . import runtime
from .model import build_model, export_weights
from .profile import StepProfiler


class SingleDevice:
    # --- setup: threads and the one device
    def __init__(self, job: Job):
        runtime.setup_threads(job)
        self.device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
        runtime.reset_peak_memory([self.device])
        # --- model: canonical weights, the shared SGD rule
        weights = load_weights(job.weights_path)
        self.model = build_model(job.spec, weights).to(self.device)
        self.optimizer = runtime.sgd(self.model, job.optimizer_spec)
        # --- data shard: the one process reads every row of each global batch
        self.rank, self.num_processes = 0, 1

    # --- step
    def train_step(self, x: np.ndarray, y: np.ndarray, lr: float) -> float:
        return runtime.train_step(self.model, self.optimizer, x, y, lr, self.device)

    # --- eval
    def evaluate(self, x: np.ndarray, y: np.ndarray) -> tuple[int, float]:
        return runtime.evaluate(self.model, x, y, self.device)

    def all_reduce_sum(self, values: np.ndarray) -> np.ndarray:
        return values

    def synchronize(self) -> None:
        runtime.synchronize(self.device)

    def peak_device_mb(self) -> list[float] | None:
        return runtime.peak_device_mb([self.device])

    def export_weights(self) -> dict[str, np.ndarray]:
        return export_weights(self.model)

    def describe(self) -> dict:
        return runtime.describe([self.device])

    # --- profile: --profile's steps, timed by phase (see profile.py)
    def profiler(self) -> StepProfiler:
        return StepProfiler(self.model, self.optimizer, self.device, self.synchronize)

    # --- teardown: nothing to release
    def teardown(self) -> None:
        pass


def main(job: Job) -> None:
    strategy = SingleDevice(job)
    run_worker(job, strategy)
    strategy.teardown()
