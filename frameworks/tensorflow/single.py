"""tf-single: one process, one device (``OneDeviceStrategy``), custom loop compiled with
``tf.function``. The baseline every TensorFlow strategy must match; it runs the same step code
as tf-mirrored and tf-multiworker, with one replica."""

from __future__ import annotations

import numpy as np

from parbench.batches import eval_slice
from parbench.data import Dataset
from parbench.feeds import Feed
from parbench.job import Job
from parbench.loop import run_worker
from parbench.modes import Observed
from parbench.weights import load_weights

from . import runtime
from .input import TFDataFeed
from .model import build_model, export_weights
from .optimizers import make_optimizer
from .profile import StepProfiler
from .runtime import tf


class SingleDevice:
    # --- setup: threads and the one device, before any TF op
    def __init__(self, job: Job):
        self.threads = runtime.setup_threads(job)
        self.strategy = tf.distribute.OneDeviceStrategy(runtime.configure_devices(0, 1)[0])
        # --- model: canonical weights, the shared optimizer rule (--optimizer, --clip-grad-norm)
        self.spec, modes = job.spec, job.run_modes
        runtime.set_precision(modes.precision)  # before the layers are created
        with self.strategy.scope():
            self.model = build_model(self.spec, load_weights(job.weights_path), modes.sync_bn)
            self.optimizer = make_optimizer(self.model, self.spec, job.optimizer_spec,
                                            modes.precision)
        self.devices = runtime.checked_replica_devices(self.strategy, self.model)
        runtime.reset_peak_memory(self.devices)
        self.step = runtime.TrainStep(self.strategy, self.model, self.optimizer,
                                      job.global_batch, modes)
        self.eval_step = runtime.make_eval_step(self.strategy, self.model)
        # --- data shard: the one process reads every row of each global batch
        self.rank, self.num_processes = 0, 1

    # --- input: tf.data through distribute_datasets_from_function (see input.py): one
    # pipeline, one replica
    def native_feed(self, job: Job, data: Dataset) -> Feed:
        return TFDataFeed(self.strategy, job, data)

    # --- step
    def train_step(self, x: np.ndarray, y: np.ndarray, lr: float) -> float:
        return runtime.train_step(self.step, self.strategy, x, y, lr)

    # --- eval
    def evaluate(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
        return runtime.evaluate(self.strategy, self.eval_step, x, y, eval_slice)

    def all_reduce_sum(self, values: np.ndarray) -> np.ndarray:
        return values

    def synchronize(self) -> None:
        runtime.synchronize(self.devices)

    def peak_device_mb(self) -> list[float] | None:
        return runtime.peak_device_mb(self.devices)

    def export_weights(self) -> dict[str, np.ndarray]:
        return export_weights(self.model, self.spec)

    def describe(self) -> dict:
        return runtime.describe(self.devices, **self.threads)

    # --- modes: what precision, compile, sync-bn and grad-accum really did in the traced step
    def observed(self) -> Observed:
        return runtime.observed(self.model, self.step.gradients, self.step.traced_micro_batches,
                                self.optimizer)

    # --- profile: --profile's steps, split by timing extra compiled functions (see profile.py)
    def profiler(self) -> StepProfiler:
        return StepProfiler(self.strategy, self.model, self.step, self.devices)

    # --- teardown: nothing to release
    def teardown(self) -> None:
        pass


def main(job: Job) -> None:
    strategy = SingleDevice(job)
    run_worker(job, strategy)
    strategy.teardown()
