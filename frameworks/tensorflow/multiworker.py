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

from parbench.run import workers
from parbench.run.job import Job
from parbench.run.loop import run_worker

from . import cluster

GLOBAL_LOSS_NOTE = "every worker reports the global-batch loss (strategy.reduce), not its own"

# Conditional on purpose: the supervising process (no worker index) only starts the workers
# (cluster.run) and must not import TensorFlow, 10 s and hundreds of MiB for a process that
# waits; every worker imports it here and builds MultiWorker. These imports are not hidden from
# the import contracts: grimp reads them like any other.
if workers.worker_index() is not None:
    from . import runtime
    from .strategy import TFStrategy
    from .tfkeras import tf
else:  # MultiWorker is never built in the supervisor: it needs only a base to define it on
    TFStrategy = object


class MultiWorker(TFStrategy):
    # --- setup: this worker's device (numbered on its node), then the cluster from TF_CONFIG,
    # whose task index the tf-config launcher gave this worker
    def __init__(self, job: Job, index: int):
        self.index = index
        super().__init__(job)

    def distribution(self, job: Job) -> tf.distribute.MultiWorkerMirroredStrategy:
        devices = runtime.configure_devices(self.index - job.first_rank, 1)  # this node's GPU
        implementation = tf.distribute.experimental.CommunicationImplementation
        self.communication = implementation.NCCL if "gpu" in devices[0] else implementation.RING
        return tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=tf.distribute.experimental.CommunicationOptions(
                implementation=self.communication))

    def describe_extras(self) -> dict:
        return {"communication": self.communication.name}

    # --- model: every worker loads the same canonical weights in the strategy's scope
    # (TFStrategy); TF also broadcasts task 0's

    # --- data shard: this worker's contiguous part of each global batch
    def data_shard(self, job: Job) -> tuple[int, int]:
        return self.index, job.world_size

    # --- input: tf.data through distribute_datasets_from_function (TFStrategy.native_feed,
    # input.py): each worker's pipeline keeps its InputContext shard of one permutation (same
    # seed everywhere)

    # --- step: gradients summed across workers (collective all-reduce) in the optimizer; the
    # loss each worker reports is the global batch's, as the record notes
    notes = (GLOBAL_LOSS_NOTE,)

    # --- eval: each worker scores its part of the test set, then the counts are summed
    def all_reduce_sum(self, values: np.ndarray) -> np.ndarray:
        return runtime.all_reduce_sum(self.strategy, values)


def main(job: Job) -> None:
    index = workers.worker_index()
    if index is None:
        cluster.run(job)
        return
    run_worker(job, partial(MultiWorker, index=index))
