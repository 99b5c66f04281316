"""tf-single: one process, one device (``OneDeviceStrategy``), custom loop compiled with
``tf.function``. The baseline every TensorFlow strategy must match; it runs the same step code
as tf-mirrored and tf-multiworker (strategy.py's TFStrategy), with one replica."""

from __future__ import annotations

from parbench.run.job import Job
from parbench.run.loop import run_worker

from . import runtime
from .strategy import TFStrategy
from .tfkeras import tf


class SingleDevice(TFStrategy):
    # --- setup: the one device, before any TF op
    def distribution(self, job: Job) -> tf.distribute.OneDeviceStrategy:
        return tf.distribute.OneDeviceStrategy(runtime.configure_devices(0, 1)[0])

    # --- model: canonical weights and the shared optimizer rule (--optimizer,
    # --clip-grad-norm), built by TFStrategy in the one device's scope

    # --- data shard: the one process reads every row of each global batch
    def data_shard(self, job: Job) -> tuple[int, int]:
        return 0, 1

    # --- input: tf.data through distribute_datasets_from_function (TFStrategy.native_feed,
    # input.py): one pipeline, one replica

    # --- step: TFStrategy's compiled step, the whole batch on the one replica

    # --- eval: the whole chunk on the one replica


def main(job: Job) -> None:
    run_worker(job, SingleDevice)
