"""--input native for TensorFlow: a ``tf.data`` pipeline handed to the strategy with
``distribute_datasets_from_function``, the way TF's custom-loop and fit guides feed replicas.

Each input pipeline (one per process: Mirrored drives all its replicas from one, MultiWorker
has one per worker) runs::

    range(n).shuffle(n, seed, reshuffle_each_iteration=True)   # the epoch's order, per repeat
            .shard(pipelines, pipeline_id)                     # this process's elements
            .batch(per_replica_batch, drop_remainder=True)     # one replica's rows of a step
            .take(steps_per_epoch * local_replicas)            # the same epoch on every worker
            .repeat()                                          # epoch after epoch, reshuffled
            .map(index -> (x[index], y[index], index))         # the rows, their indices with them
            .prefetch(AUTOTUNE)

and the strategy deals its per-replica batches to the process's replicas in turn: a step's
replica r gets the pipeline's batch ``step * local + r``. Every worker shuffles with the same
seed, so their shards are disjoint parts of one permutation.

Measured traps (TF 2.21, see docs/porting.md section 15):

* ``shard`` gives the first ``n mod k`` workers one element more, so with 4095 rows two workers
  have 2048 and 2047 rows: 64 and 63 per-replica batches of 32. Iterated to the end, TF's
  partial-batch handling (on for every MultiWorker input) keeps both workers going for 64 steps
  and hands the short worker an *empty* batch in the last one (global batch 32, not 64); a
  worker that pulled one batch more than the other crashed both on a mismatched collective
  ("Collective instance ... expected type 0 and data_type 9 but got ... data_type 1").
  ``take`` cuts every worker's epoch to the shortest one's whole steps, so each step has the
  run's fixed batch and no worker asks for a batch the others do not.
* Under Mirrored one pipeline feeds all replicas: an odd count of per-replica batches leaves
  the last one unused (TF drops it silently with ``drop_remainder``, or, without it, pads the
  step with an empty batch on the other replica); ``take`` makes the count explicit.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from parbench.contract.data import Dataset
from parbench.run.feeds import LOADER, Batch
from parbench.run.job import Job

from .tfkeras import tf

AUTOTUNE = tf.data.AUTOTUNE


def epoch_steps(n: int, global_batch: int, context: tf.distribute.InputContext) -> int:
    """Steps of one epoch, the same on every pipeline: ``shard(k, i)`` gives pipeline i
    ceil((n - i) / k) rows, so the last has the fewest, n // k; its whole per-replica batches,
    dealt ``local`` at a time, are the steps every pipeline can feed."""
    rows = context.get_per_replica_batch_size(global_batch)
    local = context.num_replicas_in_sync // context.num_input_pipelines
    steps = n // context.num_input_pipelines // rows // local
    if steps == 0:
        raise ValueError(f"{n} training rows over {context.num_input_pipelines} input pipelines "
                         f"do not fill one step of {local} x {rows} rows per pipeline")
    return steps


class IndexedPipeline:
    """``dataset_fn`` for ``distribute_datasets_from_function``: one input pipeline of (x, y,
    index) per-replica batches. The strategy calls it once per pipeline of this process, with
    the ``InputContext`` that says which shard is this process's."""

    def __init__(self, data: Dataset, seed: int, global_batch: int):
        self.x, self.y = data.x_train, data.y_train
        self.seed, self.global_batch = seed, global_batch
        self.steps_per_epoch: int | None = None  # known once the strategy called us
        self.description = ""

    def __call__(self, context: tf.distribute.InputContext) -> tf.data.Dataset:
        n = len(self.y)
        rows = context.get_per_replica_batch_size(self.global_batch)
        local = context.num_replicas_in_sync // context.num_input_pipelines
        steps = epoch_steps(n, self.global_batch, context)
        if self.steps_per_epoch not in (None, steps):
            raise RuntimeError(f"input pipelines disagree on the epoch: {steps} vs "
                               f"{self.steps_per_epoch} steps")
        self.steps_per_epoch = steps
        self.description = self._describe(n, rows, steps * local, context)
        # Called on the pipeline's host device: the arrays stay in host memory, read by gather.
        x, y = tf.constant(np.asarray(self.x)), tf.constant(np.asarray(self.y))
        order = tf.data.Dataset.range(n).shuffle(n, seed=self.seed,
                                                 reshuffle_each_iteration=True)
        mine = order.shard(context.num_input_pipelines, context.input_pipeline_id)
        # drop_remainder: every step has the run's fixed batch (the loss divides by the global
        # batch, and a short batch would retrace the step); take: see the module's docstring.
        epoch = mine.batch(rows, drop_remainder=True).take(steps * local)
        # Batch before map: one gather per batch (tf.data's "vectorized mapping"); the index
        # is the element itself, so what the record shows is what the rows were read by.
        rows_of = epoch.repeat().map(lambda index: (tf.gather(x, index), tf.gather(y, index),
                                                    index), num_parallel_calls=AUTOTUNE)
        return rows_of.prefetch(AUTOTUNE)

    def _describe(self, n: int, rows: int, batches: int,
                  context: tf.distribute.InputContext) -> str:
        return (f"tf.data via distribute_datasets_from_function: Dataset.range({n})"
                f".shuffle({n}, seed={self.seed}, reshuffle_each_iteration=True)"
                f".shard({context.num_input_pipelines}, input_pipeline_id)"
                f".batch({rows}, drop_remainder=True).take({batches}).repeat()"
                f".map(gather x, y by index, num_parallel_calls=AUTOTUNE).prefetch(AUTOTUNE); "
                f"{context.num_replicas_in_sync} replicas in sync, "
                f"{context.num_replicas_in_sync // context.num_input_pipelines} per pipeline: "
                f"a step deals that many consecutive batches to them in replica order")


def local_indices(strategy: tf.distribute.Strategy, indices) -> np.ndarray:
    """This process's replicas' training-set rows of one step (replicas x rows), read from the
    per-replica index tensors that came through the pipeline with the rows."""
    return np.stack([np.asarray(part) for part in strategy.experimental_local_results(indices)])


class TFDataFeed:
    """parbench.feeds.Feed over the distributed ``tf.data`` pipeline: each batch's x and y are
    the distributed iterator's per-replica values, handed to the strategy's step as they are."""

    order = LOADER

    def __init__(self, strategy: tf.distribute.Strategy, job: Job, data: Dataset):
        self.strategy = strategy
        self.pipeline = IndexedPipeline(data, job.seed, job.global_batch)
        self.distributed = strategy.distribute_datasets_from_function(self.pipeline)
        if self.pipeline.steps_per_epoch is None:
            raise RuntimeError("distribute_datasets_from_function did not build the pipeline")
        self.steps_per_epoch = self.pipeline.steps_per_epoch
        self.description = self.pipeline.description

    def batches(self, total_steps: int) -> Iterator[Batch]:
        # One iterator for the run: the pipeline repeats itself, reshuffling at each repeat,
        # and every repeat is exactly steps_per_epoch steps, so step // steps is its epoch.
        iterator = iter(self.distributed)
        for step in range(total_steps):
            x, y, indices = next(iterator)
            epoch, t = divmod(step, self.steps_per_epoch)
            yield Batch(x, y, local_indices(self.strategy, indices), epoch,
                        t == self.steps_per_epoch - 1)
