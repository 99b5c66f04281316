"""paddle-single: one process, one device. The baseline Paddle's parallel strategies must match."""

from __future__ import annotations

import numpy as np

from parbench.contract.data import Dataset
from parbench.contract.weights import load_weights
from parbench.run.job import Job
from parbench.run.loop import run_worker

from . import optim, runtime
from .input import LoaderFeed, single_feed
from .model import build_model, model_notes
from .modes import ModelModes


class SingleDevice(runtime.PaddleStrategy):
    # --- setup: threads and the one device
    def __init__(self, job: Job):
        runtime.setup_threads(job)
        self.device = runtime.use_device(distributed=False)
        runtime.reset_peak_memory([self.device])
        # --- model: canonical weights, the run modes (--compile: to_static), the shared
        # optimizer rule (sgd or adamw) and --clip-grad-norm
        self.module = build_model(job.spec, load_weights(job.weights_path))
        self.modes = job.modes
        self.model_modes = ModelModes(self.module, self.modes, replicas=1)
        self.optimizer = optim.make_optimizer(self.module, job.optimizer_spec, job.spec)
        self.step = runtime.TrainStep(self.module, self.optimizer, self.modes,
                                      optim.clipper(self.module, job.optimizer_spec))
        self.notes = model_notes(job.spec) + self.model_modes.notes
        # --- data shard: the one process reads every row of each global batch
        self.rank, self.num_processes = 0, 1

    # --- input: --input native, BatchSampler's RandomSampler over every row (numpy's global
    # RNG, seeded with the run's seed; see input.py)
    def native_feed(self, job: Job, data: Dataset) -> LoaderFeed:
        return single_feed(job, data)

    # --- step: --grad-accum's micro-batches accumulate gradients before the one update, which
    # clips them first (--clip-grad-norm)
    def train_step(self, x: runtime.Rows, y: runtime.Rows, lr: float) -> float:
        return self.step(x, y, lr)

    # --- eval
    def evaluate(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
        return runtime.evaluate(self.module, x, y, self.modes)


def main(job: Job) -> None:
    run_worker(job, SingleDevice)
