"""tf-mirrored: ``tf.distribute.MirroredStrategy``, one process driving N devices, custom loop.

On GPUs the replicas are the first N physical GPUs; on CPU they are N logical CPU devices,
configured before the first TF op. Without them MirroredStrategy reports N replicas and
silently keeps every one on CPU:0, so the setup checks where each replica's weights really
live and refuses to train when two share a device; the record lists every replica's device.

Each step the process reads the whole global batch and feeds replica r exactly rows
``shard_slice(B, N, r)`` (``experimental_distribute_values_from_function``), not a split TF
chooses (with --input native a ``tf.data`` pipeline feeds the replicas instead, input.py).
Each replica's loss is its shard's sum over the *global* batch (``tf.nn.compute_average_loss``);
the optimizer sums gradients across replicas, clips the sum (--clip-grad-norm) and applies
the shared rule (SGD or AdamW, optimizers.py) to every copy; ``strategy.reduce`` sums the
losses to the global-batch mean.
BatchNorm normalises each shard with its own statistics (as torch DDP does without
SyncBatchNorm) and keeps replica 0's running statistics (as DDP's buffer broadcast does);
with --sync-bn it normalises with the global batch's, all-reduced across replicas.
"""

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


class Mirrored(runtime.TFStrategy):
    # --- setup: threads, then one device per replica, before any TF op
    def __init__(self, job: Job):
        self.threads = runtime.setup_threads(job)
        devices = runtime.configure_devices(0, job.world_size)
        # TF's own choices, made explicit for the record: NCCL between GPUs; on CPU, NCCL
        # does not exist and values are reduced on one device and broadcast back.
        self.reduction = tf.distribute.NcclAllReduce() if "gpu" in devices[0] \
            else tf.distribute.ReductionToOneDevice()
        self.strategy = tf.distribute.MirroredStrategy(devices,
                                                       cross_device_ops=self.reduction)
        # --- model: canonical weights in the scope, so each replica holds a mirrored copy
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
        # --- data shard: the one process reads every global batch; the step splits it
        self.rank, self.num_processes = 0, 1

    # --- input: tf.data through distribute_datasets_from_function (see input.py): one
    # pipeline feeds every replica, consecutive per-replica batches in replica order
    def native_feed(self, job: Job, data: Dataset) -> Feed:
        return TFDataFeed(self.strategy, job, data)

    # --- step: every replica its shard, gradients summed across replicas in the optimizer
    def train_step(self, x: np.ndarray, y: np.ndarray, lr: float) -> float:
        return runtime.train_step(self.step, self.strategy, x, y, lr)

    # --- eval: the chunk split over the replicas, their predictions joined in row order
    def evaluate(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
        return runtime.evaluate(self.strategy, self.eval_step, x, y, eval_slice)

    def describe(self) -> dict:
        return runtime.describe(self.devices, cross_device_ops=type(self.reduction).__name__,
                                **self.threads)


def main(job: Job) -> None:
    run_worker(job, Mirrored)
