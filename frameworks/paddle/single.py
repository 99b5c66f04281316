"""paddle-single: one process, one device. The baseline Paddle's parallel strategies must match."""

from __future__ import annotations

import numpy as np

from parbench.data import Dataset
from parbench.job import Job
from parbench.loop import run_worker
from parbench.modes import Observed
from parbench.weights import load_weights

from . import optim, runtime
from .input import LoaderFeed, single_feed
from .model import build_model, export_weights, model_notes
from .modes import ModelModes
from .profile import StepProfiler


class SingleDevice:
    # --- setup: threads and the one device
    def __init__(self, job: Job):
        runtime.setup_threads(job)
        self.device = runtime.use_device(distributed=False)
        runtime.reset_peak_memory([self.device])
        # --- model: canonical weights, the run modes (--compile: to_static), the shared
        # optimizer rule (sgd or adamw) and --clip-grad-norm
        self.model = build_model(job.spec, load_weights(job.weights_path))
        self.modes = job.run_modes
        self.model_modes = ModelModes(self.model, self.modes, replicas=1)
        self.optimizer = optim.make_optimizer(self.model, job.optimizer_spec, job.spec)
        self.step = runtime.TrainStep(self.model, self.optimizer, self.modes,
                                      optim.clipper(self.model, job.optimizer_spec))
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
        return runtime.evaluate(self.model, x, y, self.modes)

    def all_reduce_sum(self, values: np.ndarray) -> np.ndarray:
        return values

    def synchronize(self) -> None:
        runtime.synchronize(self.device)

    def peak_device_mb(self) -> list[float] | None:
        return runtime.peak_device_mb([self.device])

    def export_weights(self) -> dict[str, np.ndarray]:
        return export_weights(self.model)

    def describe(self) -> dict:
        return runtime.describe([self.device], self.notes)

    # --- modes: what --precision, --compile and --grad-accum did on the first step, and how
    # many steps --clip-grad-norm clipped
    def observed(self) -> Observed:
        return self.model_modes.observed(self.step.micro_batches, self.step.clipped_steps)

    # --- profile: --profile's steps, timed by phase (see profile.py)
    def profiler(self) -> StepProfiler:
        return StepProfiler(self.step, self.synchronize)

    # --- teardown: nothing to release
    def teardown(self) -> None:
        pass


def main(job: Job) -> None:
    strategy = SingleDevice(job)
    run_worker(job, strategy)
    strategy.teardown()
