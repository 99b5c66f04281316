"""TFStrategy, the base class of TensorFlow's strategies (see parbench.run.loop.Strategy): the
recipe every one of them follows, written once in ``__init__``, with hooks for what differs.

A strategy file (single.py, mirrored.py, multiworker.py, mirrored_keras.py) overrides the hooks
under its section markers, and nothing else: ``distribution`` (its devices and its
``tf.distribute`` strategy), ``data_shard`` (which rows its process reads), ``describe_extras``
and ``notes`` (what its record says of it); Keras fit also ``open_input``, ``learning_rate`` and
``build_trainer``, and multi-process strategies ``all_reduce_sum``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

import numpy as np

from parbench.contract.batches import eval_slice
from parbench.contract.data import Dataset
from parbench.contract.weights import load_weights
from parbench.run.feeds import Feed
from parbench.run.footprint import Communication, StateBytes
from parbench.run.job import Job
from parbench.run.modes import Observed
from parbench.run.portable import TrainingState

from . import checkpoint, portable, runtime
from .input import TFDataFeed
from .model import build_model, export_weights
from .optimizers import make_optimizer
from .profile import StepProfiler
from .tasks import loss_for
from .tfkeras import keras, tf

NOT_COUNTED = ("not counted: tf.distribute's cross-device all-reduce runs inside the compiled "
               "step's collective ops, which expose no per-collective byte count")


class TFStrategy(ABC):
    """What every TensorFlow strategy does alike; a subclass supplies the hooks below."""

    notes: tuple[str, ...] = ()  # the record's notes on how this strategy differs

    def __init__(self, job: Job):
        # --- setup: TF's thread pools, then the strategy's devices and its tf.distribute
        # strategy, both before the first TF op; then the rows this process reads. The task's
        # loss first: a task TensorFlow does not implement stops the run before any of it.
        self.job, self.task = job, loss_for(job.task)
        self.threads = runtime.setup_threads(job)
        self.strategy = self.distribution(job)
        self.rank, self.num_processes = self.data_shard(job)
        self.open_input(job)
        # --- model: canonical weights and the shared optimizer rule (--optimizer,
        # --clip-grad-norm), created in the strategy's scope so that every replica holds its
        # copy of each variable; then a check that no two replicas share a device
        self.spec, modes = job.spec, job.modes
        runtime.set_precision(modes.precision)  # before the layers are created
        with self.strategy.scope():
            self.model = build_model(self.spec, load_weights(job.weights_path), modes.sync_bn)
            self.optimizer = make_optimizer(self.model, self.spec, job.optimizer_spec,
                                            modes.precision, self.learning_rate(job))
            self.build_trainer(job)
        self.devices = runtime.checked_replica_devices(self.strategy, self.model)
        runtime.reset_peak_memory(self.devices)
        self.eval_step = runtime.make_eval_step(self.strategy, self.model, self.task)

    # The hooks, in the order __init__ calls them
    @abstractmethod
    def distribution(self, job: Job) -> tf.distribute.Strategy:
        """Make this strategy's devices visible (runtime.configure_devices, before any TF op)
        and return its tf.distribute strategy over them."""

    @abstractmethod
    def data_shard(self, job: Job) -> tuple[int, int]:
        """(this process's rank, the processes that read data): no default, since a wrong one
        would silently train every process on the same rows."""

    def open_input(self, job: Job) -> None:
        """Where a framework loop reads the data itself (Keras fit), open it here, before the
        model: the run's length it sets may shape the training. The custom loops' feed is
        opened by parbench.run.loop instead."""

    def learning_rate(self, job: Job) -> keras.optimizers.schedules.LearningRateSchedule | None:
        """The optimizer's learning rate: None for a variable (the rule's lr until the custom
        loops' step assigns each step's rate of the common schedule), or a schedule for a loop
        that owns the steps (fit)."""
        return None

    def build_trainer(self, job: Job) -> None:
        """What takes the steps, created in the strategy's scope after the model and optimizer:
        the custom loops' compiled TrainStep (runtime.py)."""
        self.step = runtime.TrainStep(self.strategy, self.model, self.optimizer,
                                      job.global_batch, job.modes, self.task)

    def describe_extras(self) -> dict:
        """What the record's environment says of this strategy besides devices and threads."""
        return {}

    # What the run's record keeps of this strategy
    def synchronize(self) -> None:
        runtime.synchronize(self.devices)

    def peak_device_mb(self) -> list[float] | None:
        return runtime.peak_device_mb(self.devices)

    def export_weights(self) -> dict[str, np.ndarray]:
        return export_weights(self.model, self.spec)

    def describe(self) -> dict:
        return runtime.describe(self.devices, list(self.notes), **self.describe_extras(),
                                **self.threads)

    def observed(self) -> Observed:
        """What precision, compile, sync-bn and grad-accum really did in the traced step."""
        return runtime.observed(self.model, self.step.gradients, self.step.traced_micro_batches,
                                self.optimizer)

    def state_bytes(self) -> list[StateBytes]:
        """Each replica's copies of the trainable variables and of the optimizer's (gradients
        live only inside the compiled step)."""
        return [StateBytes(parameters=runtime.replica_bytes(self.strategy,
                                                            self.model.trainable_variables,
                                                            device),
                           gradients=0,
                           optimizer=runtime.replica_bytes(self.strategy,
                                                           self.optimizer.variables, device))
                for device in self.devices]

    def step_communication(self) -> Communication:
        return Communication(NOT_COUNTED, None)

    def profiler(self) -> StepProfiler:
        """--profile's steps, split by timing extra compiled functions (see profile.py)."""
        return StepProfiler(self.strategy, self.model, self.step, self.devices)

    # --- input: --input native, tf.data through distribute_datasets_from_function (input.py)
    def native_feed(self, job: Job, data: Dataset) -> Feed:
        return TFDataFeed(self.strategy, job, data)

    # --- step: the compiled step on this process's rows, each replica fed its shard
    def train_step(self, x: np.ndarray, y: np.ndarray, lr: float) -> float:
        return runtime.train_step(self.step, self.strategy, x, y, lr)

    # --- eval: this process's part of the chunk split over its replicas, their outputs joined
    # in row order; with one process no sum is needed
    def evaluate(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
        return runtime.evaluate(self.strategy, self.eval_step, x, y, eval_slice)

    def all_reduce_sum(self, values: np.ndarray) -> np.ndarray:
        return values

    # --- checkpoint: tf.train.Checkpoint of the model's variables by canonical name and the
    # optimizer; every process saves, the chief's (rank 0's) files stay, and each other
    # worker's own BatchNorm statistics (checkpoint.py)
    def save_checkpoint(self, folder: Path) -> None:
        checkpoint.save(folder, self.model, self.optimizer, self.rank)

    def load_checkpoint(self, folder: Path) -> None:
        checkpoint.load(folder, self.model, self.optimizer, self.rank)

    # the same state in the contract's terms, which any framework reads (see portable.py)
    def portable_state(self, step: int) -> TrainingState:
        return portable.portable_state(self.model, self.optimizer, self.spec,
                                       self.job.optimizer_spec.name, step)

    def load_portable(self, state: TrainingState) -> None:
        portable.load_portable(self.model, self.optimizer, self.spec, state)

    # --- teardown: TF has no call to leave a strategy or its cluster: the process's exit
    # releases it, after a failure too (nothing here can wait for a peer)
    def teardown(self, failed: bool) -> None:
        pass
