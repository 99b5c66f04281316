"""tf-single: one process, one device (``OneDeviceStrategy``), custom loop compiled with
``tf.function``. The baseline every TensorFlow strategy must match; it runs the same step code
as tf-mirrored and tf-multiworker, with one replica."""

from __future__ import annotations

import numpy as np

from parbench.contract.batches import eval_slice
from parbench.contract.data import Dataset
from parbench.contract.weights import load_weights
from parbench.run.feeds import Feed
from parbench.run.job import Job
from parbench.run.loop import run_worker

from . import runtime
from .input import TFDataFeed
from .model import build_model
from .optimizers import make_optimizer
from .runtime import tf


class SingleDevice(runtime.TFStrategy):
    # --- setup: threads and the one device, before any TF op
    def __init__(self, job: Job):
        self.threads = runtime.setup_threads(job)
        self.strategy = tf.distribute.OneDeviceStrategy(runtime.configure_devices(0, 1)[0])
        # --- model: canonical weights, the shared optimizer rule (--optimizer, --clip-grad-norm)
        self.spec, modes = job.spec, job.modes
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


def main(job: Job) -> None:
    run_worker(job, SingleDevice)
