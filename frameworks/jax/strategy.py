"""The base class of the JAX strategies (see parbench.run.loop.Strategy): the constructor's
recipe, written once, and the hooks where a strategy differs from its siblings.

The class is laid out by the porting guide's sections, like each strategy file, and a strategy
file (single.py, pmap.py, sharded.py) overrides only the hooks under its own markers:

    setup       ``setup_devices``: the devices it trains on and the shardings it places with
    model       ``place_state``: where the state lives (``stacked_params`` / ``stacked_stats``:
                which arrays carry a leading replica axis); ``stats_note`` for the record
    data shard  ``place_batch``: a global batch's rows on the devices, as the contract's shards
    input       nothing: --input native is refused for every JAX strategy
    step        ``compile_step`` (jit, pmap, jit with out_shardings); the traced step's
                ``step_loss``, ``micro_batch_axis`` and ``global_mean``; ``host_loss``
    eval        nothing: evaluation runs replica 0's copy on its device, whatever the strategy
    checkpoint  nothing: Orbax reads each array into the shardings the state has, and
                ``stacked_params`` / ``stacked_stats`` say which it saves replica 0's copy of

One process drives every device, so each strategy is rank 0 of 1 and reads every row of each
global batch.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from functools import partial
from pathlib import Path

import jax
import numpy as np
import optax

from parbench.contract.data import Dataset
from parbench.contract.spec import ModelSpec
from parbench.contract.weights import load_weights
from parbench.run.feeds import Feed
from parbench.run.footprint import Communication, StateBytes
from parbench.run.job import Job
from parbench.run.modes import COMPUTE_DTYPES, Modes, Observed
from parbench.run.portable import TrainingState
from parbench.run.profiling import StepProfiler
from parbench.run.registry import get_backend

from . import footprint, model, portable, runtime, tasks, training
from .layers import Params, Stats
from .optim import make_optimizer
from .training import LossOf, TrainState


class JaxStrategy(ABC):
    """What every JAX strategy does alike; a subclass implements the abstract hooks and
    overrides the others where it differs."""

    backend: str
    settings: dict  # what runtime.configure set, for the record
    modes: Modes
    spec: ModelSpec
    task: tasks.TaskLoss  # the run's task: its loss and evaluation outputs
    optimizer: optax.GradientTransformation  # the shared rule (--optimizer, --clip-grad-norm)
    clip: float | None  # --clip-grad-norm
    state: TrainState  # placed where the step keeps it
    placed_on: list[jax.Device]  # every replica's device, every process's: where it is placed
    devices: list[jax.Device]  # where the replicas live (runtime.checked_replica_devices)
    sync_bn_layers: int  # BatchNorm layers whose statistics the step takes over every device
    notes: list[str]
    compiles: runtime.CompileCounter
    traced: dict  # what the step saw while tracing: micro_batches, compute_dtype

    # --- setup: JAX's backend reads the device count and compute threads once, when it
    # starts, so they are set first thing, before the strategy takes its devices
    def __init__(self, job: Job):
        self.settings = runtime.configure(job, self.devices_per_process(job))
        self.backend, self.modes = job.backend, job.modes
        devices = self.setup_devices(job)
        # model: canonical weights as (parameters, running statistics), the shared optimizer
        # rule (--optimizer, --clip-grad-norm) and the run's task, placed where the step
        # keeps them; every copy comes from the same host arrays, so none needs a broadcast
        self.spec, self.task = job.spec, tasks.loss_for(job.task)
        self.compute_dtype = COMPUTE_DTYPES[job.modes.precision]  # --precision: Flax's dtype
        self.optimizer, self.rule = make_optimizer(self.spec, job.optimizer_spec), \
            job.optimizer_spec.name
        self.clip = job.optimizer_spec.clip_grad_norm
        state = training.initial_state(self.spec, load_weights(job.weights_path), self.optimizer)
        self.state, self.placed_on = self.place_state(state, devices), devices
        local = [device for device in devices if device.process_index == jax.process_index()]
        self.devices = runtime.checked_replica_devices(self.state.params, len(local))
        syncs = self.modes.sync_bn and len(devices) > 1  # one device has no other statistics
        self.sync_bn_layers = runtime.batchnorm_layers(state.stats) if syncs else 0
        note = self.stats_note()
        self.notes = [note] if note and state.stats else []
        # step, then eval: each compiled on its first call; the counter sees recompilations
        self.compiles, self.traced = runtime.CompileCounter(), {}
        self.step = self.compile_step(devices)
        self.batch_shapes: tuple | None = None  # the first batch's, kept by train_step
        self.eval_step = runtime.evaluation(self.spec, self.task, self.compute_dtype,
                                            self.stacked_params, self.stacked_stats)

    def devices_per_process(self, job: Job) -> int:
        """The devices this process drives: every one of its node's (one process per node);
        set before JAX's backend starts."""
        return job.world_size // job.nnodes

    @abstractmethod
    def setup_devices(self, job: Job) -> list[jax.Device]:
        """The devices this strategy trains on, in replica order (the backend has its settings
        by now); sets the shardings its other hooks place arrays with."""

    # --- model: where the state lives; a stacked array has a leading replica axis, entry d on
    # device d, of which evaluation and the export read entry 0
    stacked_params: bool = False
    stacked_stats: bool = False

    @abstractmethod
    def place_state(self, state: TrainState, devices: list[jax.Device]) -> TrainState:
        """The initial state (host arrays) on ``devices``, as the compiled step takes it."""

    def stats_note(self) -> str | None:
        """The record's note on where the BatchNorm running statistics are kept (a model with
        none gets no note), or None."""
        return None

    # --- data shard: one process reads every row of each global batch (jax-multiprocess: each
    # its rank's rows); a strategy places them on its devices as the contract's shards
    rank, num_processes = 0, 1

    @abstractmethod
    def place_batch(self, rows: np.ndarray) -> jax.Array:
        """A global batch's rows (inputs or labels) where the compiled step reads them."""

    # --- input: JAX has no loader of its own, so --input native is refused (the registry
    # says why, before a run starts; this says it again if a strategy is ever asked)
    def native_feed(self, job: Job, data: Dataset) -> Feed:
        raise RuntimeError(f"--input native is not available for {self.backend}: "
                           f"{get_backend(self.backend).info.refusals['input']}")

    # --- step: one compiled program per step: the loss's value_and_grad over --grad-accum
    # micro-batches, the devices' gradients combined into the global batch's, --clip-grad-norm
    # on that, the update; lr is an argument, so a new rate does not recompile
    @abstractmethod
    def compile_step(self, devices: list[jax.Device]) -> Callable:
        """``compiled_step`` compiled for this strategy's devices (jit, pmap, ...), donating
        the state it replaces."""

    micro_batch_axis = 0  # the axis of the rows that --grad-accum splits into micro-batches

    def compiled_step(self, state: TrainState, x: jax.Array, y: jax.Array,
                      lr: jax.Array) -> tuple[TrainState, jax.Array]:
        loss, grads, stats, passes = training.accumulated_gradient(
            self.step_loss(), state.params, state.stats, x, y, self.modes.grad_accum,
            axis=self.micro_batch_axis)
        self.traced["micro_batches"] = passes  # what the traced program runs, for observed
        grads, loss = self.global_mean(grads, loss)
        return training.apply_update(self.optimizer, self.clip, state, grads, stats, lr), loss

    def model_loss(self, sync_axis: str | None = None) -> LossOf:
        """The run's task's mean loss of the model's training-mode forward over the rows given,
        the layers in the run's precision; ``sync_axis``: BatchNorm's statistics over that pmap
        axis (model.apply). Tracing it records the dtype the layers computed in."""
        return partial(model.loss_fn, self.spec, sync_axis=sync_axis, task=self.task,
                       dtype=self.compute_dtype, seen=self.traced)

    def step_loss(self) -> LossOf:
        """What the step differentiates: the model's loss over the rows the program holds."""
        return self.model_loss()

    def global_mean(self, grads: Params, loss: jax.Array) -> tuple[Params, jax.Array]:
        """The global batch's gradient and loss from the step's own: the same where the
        program's loss is already the global batch's (one device, or one program over them)."""
        return grads, loss

    def train_step(self, x: np.ndarray, y: np.ndarray, lr: float) -> float:
        x, y = self.place_batch(x), self.place_batch(y)
        if self.batch_shapes is None:  # what step_communication() lowers the step for
            self.batch_shapes = jax.tree.map(_abstract, (x, y))
        with self.compiles.counting():
            self.state, loss = self.step(self.state, x, y, np.float32(lr))
        return self.host_loss(loss)

    def host_loss(self, loss: jax.Array) -> float:
        """The step's loss as the loop records it."""
        return float(loss)

    # --- eval: the compiled forward in inference mode on the first device, with replica 0's
    # parameters and running statistics, and the task's outputs: no collective. They come to
    # the host in the task's dtype (indices as int64, a detector's maps as float32)
    def evaluate(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
        outputs, loss_sum = self.eval_step(*self.replica_zero(), x, y)
        return np.asarray(outputs, self.task.outputs_dtype), float(loss_sum)

    def replica_zero(self) -> tuple[Params, Stats]:
        """The first replica's parameters and running statistics, on the first device (what
        evaluation uses and the record exports, as torch DDP and TF MirroredStrategy keep
        replica 0's statistics); stacked arrays keep a replica axis of 1."""
        first = self.devices[0]
        return runtime.on_device(self.state.params, first), \
            runtime.on_device(self.state.stats, first)

    # --- record: what the loop asks for besides, alike for every JAX strategy
    def export_weights(self) -> dict[str, np.ndarray]:
        first = self.devices[0]
        return model.export_weights(
            self.spec, runtime.host_copy(self.state.params, first, self.stacked_params),
            runtime.host_copy(self.state.stats, first, self.stacked_stats))

    def observed(self) -> Observed:
        """What the traced step did (see parbench.run.modes): the dtype it computes in and the
        micro-batches it holds (seen while tracing), the XLA compilations of the step, the
        BatchNorm layers whose statistics span every replica, the steps clipping shrank."""
        clipped = None
        if self.clip is not None:
            clipped = int(runtime.host_copy(self.state.clipped, self.devices[0],
                                            self.stacked_params))
        return Observed(compute_dtype=self.traced.get("compute_dtype", "not traced"),
                        compiled_graphs=self.compiles.count,
                        sync_bn_layers=self.sync_bn_layers,
                        micro_batches=self.traced.get("micro_batches", 0),
                        clipped_steps=clipped)

    def describe(self) -> dict:
        return runtime.describe(self.devices, self.settings, self.notes)

    def state_bytes(self) -> list[StateBytes]:
        return footprint.state_bytes(self.state, self.devices)

    def step_communication(self) -> Communication:
        """The collectives of the step's program, lowered again for the first batch's shapes
        (outside the timed steps; the compile counter does not see it)."""
        if self.modes.grad_accum > 1:
            return Communication(footprint.NOT_COUNTED_ACCUMULATING, None)
        lowered = self.step.lower(jax.tree.map(_abstract, self.state), *self.batch_shapes,
                                  np.float32(0.0))
        return footprint.collectives(lowered.compile().as_text(), len(self.devices))

    def all_reduce_sum(self, values: np.ndarray) -> np.ndarray:
        return values  # one process

    def synchronize(self) -> None:
        jax.block_until_ready(self.state)  # the last step's outputs

    def peak_device_mb(self) -> list[float] | None:
        return runtime.peak_device_mb(self.devices)

    def profiler(self) -> StepProfiler:
        raise RuntimeError(f"--profile is not available for {self.backend}: "
                           f"{get_backend(self.backend).profile_refusal}")

    # --- checkpoint: the state through Orbax, each array saved as its sharding places it and
    # read back into this strategy's, a stacked one as replica 0's copy (see checkpoint.py).
    # Imported here: Orbax's 0.4 s of imports are paid by the runs that checkpoint
    def save_checkpoint(self, folder: Path) -> None:
        from . import checkpoint

        checkpoint.save(folder, self.state, self.stacked_parts())

    def load_checkpoint(self, folder: Path) -> None:
        from . import checkpoint

        self.state = checkpoint.load(folder, self.state, self.stacked_parts())

    # the same state in the contract's terms, which any framework reads (see portable.py)
    def portable_state(self, step: int) -> TrainingState:
        opt_state = jax.device_get(self.state.opt_state)  # whole, of a sharded array too
        if self.stacked_params:
            opt_state = jax.tree.map(lambda entries: entries[0], opt_state)
        return portable.portable_state(self.spec, self.export_weights(), opt_state, self.rule,
                                       step)

    def load_portable(self, state: TrainingState) -> None:
        self.state = self.place_state(portable.host_state(self.spec, self.optimizer, state),
                                      self.placed_on)

    def stacked_parts(self) -> TrainState:
        """Which parts of the state carry a leading replica axis."""
        return TrainState(params=self.stacked_params, stats=self.stacked_stats,
                          opt_state=self.stacked_params, clipped=self.stacked_params)

    def teardown(self, failed: bool) -> None:
        pass  # no process group: the process's exit releases the devices


def _abstract(array: jax.Array) -> jax.ShapeDtypeStruct:
    """``array``'s shape, dtype and placement, for lowering a program without its values."""
    return jax.ShapeDtypeStruct(array.shape, array.dtype, sharding=array.sharding)
