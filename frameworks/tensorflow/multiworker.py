"""tf-multiworker: ``MultiWorkerMirroredStrategy``, one process per device, custom loop.

Launched by ``tf-config`` (see cluster.py): the harness starts one process, which starts the
workers, each with ``TF_CONFIG`` naming every worker at ``127.0.0.1:PORT``. Collectives use
RING on CPU and NCCL on GPUs. Each worker feeds only its contiguous part of every global batch
(--input native: its ``InputContext`` shard of the ``tf.data`` pipeline, see input.py);
its loss is that part's sum over the *global* batch, so the gradients the strategy sums across
workers are those of the global-batch mean. Each worker reports the global-batch loss
(``strategy.reduce``, the TF idiom), which leaves the harness's row-weighted mean unchanged.

Keras 3 ``model.fit`` fails under this strategy (keras-team/keras#20585: "Attempt to convert a
value (PerReplica...)"), so there is no fit variant here: tf-mirrored-keras accepts only the
``python`` launcher, and asking it for ``tf-config`` is refused before anything starts.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from parbench.contract.batches import eval_slice
from parbench.contract.data import Dataset
from parbench.contract.weights import load_weights
from parbench.run.feeds import Feed
from parbench.run.job import Job
from parbench.run.loop import run_worker

from . import cluster

GLOBAL_LOSS_NOTE = "every worker reports the global-batch loss (strategy.reduce), not its own"

if cluster.worker_index() is not None:  # the supervising process never imports TensorFlow
    from . import runtime
    from .input import TFDataFeed
    from .model import build_model
    from .optimizers import make_optimizer
    from .runtime import TFStrategy, tf
else:  # it only starts the workers, and each worker builds the strategy
    TFStrategy = object


class MultiWorker(TFStrategy):
    # --- setup: threads, this worker's device (numbered on its node), then the cluster
    # from TF_CONFIG
    def __init__(self, job: Job, index: int):
        self.threads = runtime.setup_threads(job)
        devices = runtime.configure_devices(index - job.first_rank, 1)  # this node's GPU
        implementation = tf.distribute.experimental.CommunicationImplementation
        self.communication = implementation.NCCL if "gpu" in devices[0] else implementation.RING
        self.strategy = tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=tf.distribute.experimental.CommunicationOptions(
                implementation=self.communication))
        # --- model: every worker loads the same canonical weights (TF also broadcasts task 0's)
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
        # --- data shard: this worker's contiguous part of each global batch
        self.rank, self.num_processes = index, job.world_size

    # --- input: tf.data through distribute_datasets_from_function (see input.py): each
    # worker's pipeline keeps its InputContext shard of one permutation (same seed everywhere)
    def native_feed(self, job: Job, data: Dataset) -> Feed:
        return TFDataFeed(self.strategy, job, data)

    # --- step: gradients summed across workers (collective all-reduce) in the optimizer
    def train_step(self, x: np.ndarray, y: np.ndarray, lr: float) -> float:
        return runtime.train_step(self.step, self.strategy, x, y, lr)

    # --- eval: each worker scores its part of the test set, then the counts are summed
    def evaluate(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
        return runtime.evaluate(self.strategy, self.eval_step, x, y, eval_slice)

    def all_reduce_sum(self, values: np.ndarray) -> np.ndarray:
        return runtime.all_reduce_sum(self.strategy, values)

    def describe(self) -> dict:
        return runtime.describe(self.devices, [GLOBAL_LOSS_NOTE],
                                communication=self.communication.name, **self.threads)


def main(job: Job) -> None:
    index = cluster.worker_index()
    if index is None:
        cluster.run(job)
        return
    run_worker(job, partial(MultiWorker, index=index))
