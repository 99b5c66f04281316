"""tf-mirrored-keras: ``MirroredStrategy`` through Keras ``model.fit``, how most TF users write
data-parallel training. It is tf-mirrored (``MirroredKeras`` subclasses ``Mirrored``): its
devices, model, optimizer and replica-device check, with fit driving the steps.

What fit changes, and how the contract still holds:

* Data: fit reads a ``tf.data`` pipeline, not the loop's arrays. It is built with
  ``distribute_datasets_from_function``: with --input arrays the one input pipeline yields,
  for every global batch of the contract (``ArrayFeed``) in order, its N shards
  ``shard_slice(B, N, r)``, and the strategy deals pipeline elements to replicas round robin,
  so replica r trains on exactly the rows the custom loop gives it (checked by the BatchNorm
  equivalence test, where a different split would change the batch statistics). With --input
  native it is the custom loops' own ``tf.data`` pipeline (input.py), handed to fit as it is.
  Either way every element carries its rows' training-set indices, which the train step keeps
  per replica (``FeedProbe``) for the record. fit first takes one batch from an iterator of
  its own to build the model symbolically (Keras' ``_maybe_symbolic_build``) and drops it:
  that iteration uses up the native pipeline's first shuffle order, so fit trains on the
  orders a custom loop with the same seed gets from its second epoch on (measured); the
  arrays generator simply starts again at the contract's first batch.
* Learning rate: a schedule indexed by the optimizer's step counter, holding
  ``parbench.optim.lr_at`` of every step.
* Loss: the task's per-example loss (tasks.py), the one the custom loops use, as a Keras loss
  reduced the Keras way (each replica's shard mean divided by N, what the custom loop computes
  as the shard's sum over the global batch): fit's arithmetic stays Keras' own. The train step
  is Keras' default, except that it reports each step's loss; the default reports the epoch's
  running mean.
* Optimizer: the custom loops' shared rule, passed to ``compile``; its --clip-grad-norm clips
  the replicas' *summed* gradient inside the optimizer's cross-replica sum, where Keras' own
  ``global_clipnorm`` would clip each replica's part before the sum (optimizers.py).
* Bookkeeping: fit owns the loop, so ``run_worker`` hands it the training (``train=``) and
  keeps the rest: building the strategy, writing a failure, the teardown. A callback does per
  step what the loop does (fault injection, timings, losses, progress, the loop's own
  ``Evaluations``: when to evaluate, and stopping fit at a --target through
  ``model.stop_training``) and the loop's ``write_rank_log`` writes rank0.json.
  fit takes each batch inside its compiled train function, out of the loop's sight, so the
  wait for data is measured there: ``tf.timestamp`` when the replicas' step starts and when its
  batch is on every replica (``FeedProbe``). A step is timed from fit's batch-begin to batch-end
  hook, less that wait, so step and wait split the time as in the custom loops.
  After the first batch it checks that the run modes took effect, as the loop does.
* Modes: the precision policy, loss scaling (fp16) and synchronized BatchNorm as in the custom
  loops. --compile is not fit's ``jit_compile=True``: that compiles the whole per-replica step,
  optimizer included, which fails under MirroredStrategy ("Trying to access resource ...
  located in device CPU:1 from device CPU:0", measured); the train step below compiles its
  loss+gradient function instead, as tf-mirrored does. --grad-accum is refused: fit applies the
  optimizer on every batch.

MultiWorkerMirroredStrategy + Keras 3 fit fails upstream (keras-team/keras#20585), so this
backend takes only the ``python`` launcher; ``--launcher tf-config`` is refused up front.
"""

from __future__ import annotations

import time
from typing import NoReturn

import numpy as np

from parbench.contract.batches import shard_slice
from parbench.contract.data import Dataset
from parbench.contract.optim import lr_at
from parbench.run.feeds import Batch, FeedLog, run_length
from parbench.run.job import Job
from parbench.run.loop import (
    Evaluations,
    Progress,
    RankLog,
    all_finite,
    check_modes,
    cpu_since,
    cpu_times,
    finish_rank_log,
    footprint,
    inject_test_fault,
    open_feed,
    run_worker,
)
from parbench.run.modes import Observed

from . import runtime
from .input import TFDataFeed
from .mirrored import Mirrored
from .tfkeras import keras, tf

FIT_TIMING_NOTE = ("Keras fit: fit takes each batch from its tf.data pipeline inside the compiled "
                   "train function; a step is timed from batch-begin to batch-end hook, less the "
                   "wait for its batch measured in that function (tf.timestamp at the replicas' "
                   "start and once the batch is on every replica)")


class StepRates(keras.optimizers.schedules.LearningRateSchedule):
    """The common schedule's rate of every step, looked up by the optimizer's step count."""

    def __init__(self, rates: list[float]):
        self.rates = tf.constant(rates, tf.float32)

    def __call__(self, step: tf.Tensor) -> tf.Tensor:
        return tf.gather(self.rates, tf.minimum(step, len(self.rates) - 1))


class FeedProbe:
    """What fit's train step saw of its batch, kept per replica for the callback: the rows'
    training-set indices, and when the step started and when its batch was there. ON_READ
    variables hold one value per replica (``experimental_local_results`` reads them all)."""

    def __init__(self, rows: int):
        def per_replica(value) -> tf.Variable:
            return tf.Variable(value, trainable=False,
                               synchronization=tf.VariableSynchronization.ON_READ,
                               aggregation=tf.VariableAggregation.NONE)

        self.indices = per_replica(tf.zeros([rows], tf.int64))
        # tf.timestamp's seconds since the epoch need float64's precision
        self.started, self.arrived = (per_replica(tf.constant(0.0, tf.float64)) for _ in range(2))

    def record(self, x: tf.Tensor, y: tf.Tensor, indices: tf.Tensor) -> tuple:
        """In the replica's train step: the timestamp without inputs runs as the step function
        starts, the other once the replica's batch (the function's input) has arrived. Returns
        x and y made to wait for that timestamp: an op nothing waits for may run late (measured:
        up to the end of the step), so the step's compute depends on it."""
        started = tf.timestamp()
        with tf.control_dependencies([x, y, indices]):
            arrived = tf.timestamp()
        self.started.assign(started)
        self.arrived.assign(arrived)
        self.indices.assign(indices)
        with tf.control_dependencies([arrived]):
            return tf.identity(x), tf.identity(y)

    def read(self, strategy: tf.distribute.Strategy) -> tuple[np.ndarray, float]:
        """(replicas x rows indices, seconds from the first replica's start to the last
        replica's batch) of the step that just ran."""
        def values(variable: tf.Variable) -> list[np.ndarray]:
            return [np.asarray(v) for v in strategy.experimental_local_results(variable)]

        wait = max(values(self.arrived)) - min(values(self.started))
        return np.stack(values(self.indices)), max(0.0, float(wait))


class StepLossModel(keras.Model):
    """Wraps the spec's model for fit: Keras' default train step (loss scaled for fp16), its
    loss+gradient function XLA-compiled with --compile, reporting this step's loss. Its batches
    are (x, y, indices): the indices go to the probe, not to the loss."""

    def __init__(self, net: keras.Model, optimizer: keras.optimizers.Optimizer, jit: bool,
                 probe: FeedProbe):
        super().__init__()
        self.net, self.probe = net, probe
        self.gradients = runtime.GradientFunction(self, optimizer, self._loss, jit)

    def call(self, x: tf.Tensor, training: bool = False) -> tf.Tensor:
        return self.net(x, training=training)

    def _loss(self, x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        return self.compute_loss(x=x, y=y, y_pred=self(x, training=True), training=True)

    def train_step(self, data: tuple) -> dict:
        x, y = self.probe.record(*data)
        loss, gradients = self.gradients(x, y)
        self.optimizer.apply(gradients, self.trainable_variables)
        # fit averages what replicas return: the shard means average to the global mean
        return {"loss": loss * self.distribute_strategy.num_replicas_in_sync}


class MirroredKeras(Mirrored):
    # --- setup: tf-mirrored's (Mirrored.distribution): one device per replica, before any TF
    # op; the record says fit drove the steps
    def describe_extras(self) -> dict:
        return {**super().describe_extras(), "keras_fit": True}

    # --- model: compiled in the scope with the shared rule (clipping the replicas' summed
    # gradient, as the custom loops do) and the common schedule over the run's length (which
    # the data shard's pipeline sets); fit trains the spec's model wrapped in StepLossModel,
    # its loss the task's (tasks.py) as a Keras loss
    def learning_rate(self, job: Job) -> StepRates:
        return StepRates([lr_at(step, self.total, job.optimizer_spec)
                          for step in range(self.total)])

    def build_trainer(self, job: Job) -> None:
        self.probe = FeedProbe(job.global_batch // job.world_size)
        self.fit_model = StepLossModel(self.model, self.optimizer, job.modes.compile, self.probe)
        # fit's own XLA would compile the optimizer too: StepLossModel compiles less
        self.fit_model.compile(optimizer=self.optimizer, loss=self.task.keras_loss(),
                               jit_compile=False, steps_per_execution=1)
        self._build_for_fit()

    def _build_for_fit(self) -> None:
        """Build the wrapper and its compiled loss on one training row, so fit finds nothing
        to build. Otherwise fit builds them symbolically from its first batch, which it reduces
        across replicas with MEAN to learn the shapes (Keras' ``_maybe_symbolic_build``): the
        mean of int64 token ids is a float tensor, and the GPT's embedding lookup refuses float
        indices (measured, Keras 3.15). A float image batch passed through unharmed."""
        x, y = (np.asarray(rows[:1]) for rows in (self.data.x_train, self.data.y_train))
        self.fit_model.compute_loss(x=x, y=y, y_pred=self.fit_model(x), training=False)

    # --- data shard: tf-mirrored's (the one process reads every global batch); fit reads it
    # from one pipeline, every global batch as its N shards in replica order, opened before the
    # model: the run's length sets the learning-rate schedule
    def open_input(self, job: Job) -> None:
        self.data = Dataset.load(job.data_path, job.dataset)
        self.feed = open_feed(job, self, self.data)
        self.total = run_length(job, self.feed)
        self.dataset = self.feed.distributed if isinstance(self.feed, TFDataFeed) else \
            self.strategy.distribute_datasets_from_function(self._contract_pipeline)

    # --- input: tf.data through distribute_datasets_from_function (TFStrategy.native_feed,
    # input.py), handed to fit as it is: one pipeline, consecutive per-replica batches in
    # replica order

    # --- contract pipeline: --input arrays through fit, the loop's ArrayFeed as a tf.data
    # generator of (x, y, indices) shards, N per global batch in replica order
    def _contract_shards(self):
        for batch in self.feed.batches(self.total):
            replicas = len(batch.indices)
            for replica, indices in enumerate(batch.indices):
                rows = shard_slice(len(batch.y), replicas, replica)
                yield batch.x[rows], batch.y[rows], indices

    def _contract_pipeline(self, _context: tf.distribute.InputContext) -> tf.data.Dataset:
        rows = self.job.global_batch // self.job.world_size
        # the data's own row shapes and dtypes: images float32 with one int64 label a row, token
        # ids int64 with one int64 label a position, a detector's images with float32 label maps
        signature = (tf.TensorSpec((rows, *self.data.input_shape), self.data.x_train.dtype),
                     tf.TensorSpec((rows, *self.data.y_train.shape[1:]), self.data.y_train.dtype),
                     tf.TensorSpec((rows,), tf.int64))
        shards = tf.data.Dataset.from_generator(self._contract_shards,
                                                output_signature=signature)
        return shards.prefetch(2 * self.job.world_size)  # the next two global batches

    # --- step: fit runs Keras' train step on every replica; StepLog times it, as the record
    # notes
    notes = (FIT_TIMING_NOTE,)

    def train(self) -> RankLog:
        log = StepLog(self)
        self.fit_model.fit(self.dataset, epochs=1, steps_per_epoch=self.total,
                           callbacks=[log], verbose=2 if self.job.verbose else 0)
        return log.finish()

    def train_step(self, x: np.ndarray, y: np.ndarray, lr: float) -> NoReturn:
        raise NotImplementedError("Keras fit takes the steps (MirroredKeras.train)")

    # --- eval: the chunk split over the replicas, their predictions joined in row order
    # (TFStrategy.evaluate, as tf-mirrored), called by StepLog at every epoch end

    # --- modes: what precision, compile, sync-bn and grad-accum really did in the traced step
    def observed(self) -> Observed:
        # one backward pass per batch: fit applies the optimizer on each (no accumulation)
        return runtime.observed(self.model, self.fit_model.gradients, 1, self.optimizer)

    # --- profile: refused for this backend before anything starts (parbench.run.registry)
    def profiler(self) -> NoReturn:
        raise NotImplementedError("Keras fit runs its own training loop: no --profile")


class StepLog(keras.callbacks.Callback):
    """The loop's per-step bookkeeping, driven by fit's batch hooks."""

    def __init__(self, strategy: MirroredKeras):
        super().__init__()
        job = strategy.job
        self.strategy, self.job, self.train_s = strategy, job, 0.0
        self.total, self.per_epoch = strategy.total, strategy.feed.steps_per_epoch
        self.log, self.fed = RankLog(rank=0, rows=job.global_batch), FeedLog(strategy.feed)
        self.progress, self.start = Progress(job, 0, self.total), 0.0
        self.cpu = (0.0, 0.0)
        self.evaluations = Evaluations(job, strategy, strategy.data)

    def on_train_begin(self, logs: dict | None = None) -> None:
        self.evaluations.start_clock()  # fit reads its first batch next

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        inject_test_fault(0, batch)
        if batch == 0:
            self.log.first_step_start = time.time()
        self.start, self.cpu = time.perf_counter(), cpu_times()

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        # fit fetched the loss to Python before calling this hook: the step has finished
        self.strategy.synchronize()
        elapsed = time.perf_counter() - self.start
        self.log.cpu_s.append(cpu_since(self.cpu))
        indices, waited = self.strategy.probe.read(self.strategy.strategy)
        epoch_end = (batch + 1) % self.per_epoch == 0
        self.fed.add(Batch(None, None, indices, batch // self.per_epoch, epoch_end), waited)
        self.log.step_s.append(max(0.0, elapsed - waited))
        self.log.losses.append(float(logs["loss"]))
        self.train_s += self.log.step_s[-1]
        if batch == 0:
            check_modes(self.job, self.strategy)
            self.log.state_bytes, self.log.communication = footprint(self.strategy)
        self.progress.update(batch + 1)
        if not all_finite(self.strategy, self.log.losses[-1]):  # as the loop stops
            self.log.diverged_step, self.model.stop_training = batch, True
            return
        if self.evaluations.due(batch, epoch_end, self.total) \
                and self.evaluations.reached_target(self.log, batch, self.train_s):
            self.model.stop_training = True  # fit ends after this step, as the loop does

    def finish(self) -> RankLog:
        self.progress.update(len(self.log.step_s), force=True)
        return finish_rank_log(self.job, self.strategy, self.log, self.fed)


def main(job: Job) -> None:
    run_worker(job, MirroredKeras, train=MirroredKeras.train)
