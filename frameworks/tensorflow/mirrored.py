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

What every TensorFlow strategy does alike (threads, the model in the strategy's scope, the
compiled step, evaluation) is strategy.py's TFStrategy; this file holds what MirroredStrategy
adds to it.
"""

from __future__ import annotations

from parbench.run.job import Job
from parbench.run.loop import run_worker

from . import runtime
from .strategy import TFStrategy
from .tfkeras import tf


class Mirrored(TFStrategy):
    # --- setup: one device per replica, before any TF op
    def distribution(self, job: Job) -> tf.distribute.MirroredStrategy:
        devices = runtime.configure_devices(0, job.world_size)
        # TF's own choices, made explicit for the record: NCCL between GPUs; on CPU, NCCL
        # does not exist and values are reduced on one device and broadcast back.
        self.reduction = tf.distribute.NcclAllReduce() if "gpu" in devices[0] \
            else tf.distribute.ReductionToOneDevice()
        return tf.distribute.MirroredStrategy(devices, cross_device_ops=self.reduction)

    def describe_extras(self) -> dict:
        return {"cross_device_ops": type(self.reduction).__name__}

    # --- model: canonical weights built by TFStrategy in the strategy's scope, so each replica
    # holds a mirrored copy, then checked to live on a device of its own

    # --- data shard: the one process reads every global batch; the step splits it
    def data_shard(self, job: Job) -> tuple[int, int]:
        return 0, 1

    # --- input: tf.data through distribute_datasets_from_function (TFStrategy.native_feed,
    # input.py): one pipeline feeds every replica, consecutive per-replica batches in replica
    # order

    # --- step: every replica its shard, gradients summed across replicas in the optimizer
    # (TFStrategy.train_step)

    # --- eval: the chunk split over the replicas, their predictions joined in row order
    # (TFStrategy.evaluate)


def main(job: Job) -> None:
    run_worker(job, Mirrored)
