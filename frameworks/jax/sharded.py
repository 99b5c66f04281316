"""jax-sharded: one ``jax.jit`` program over a 1-D device mesh, the batch split across the
devices by its sharding, the parameters replicated; the compiler (GSPMD) partitions the step
and inserts the collectives (the gradient all-reduce) itself.

Each step the process reads the whole global batch, as [N, B/N, ...] row blocks sharded over
the mesh's ``data`` axis: device d holds block d, the contract's shard d. The loss is the mean
over the global batch, so its gradient needs no averaging by hand.

The trap: BatchNorm over a sharded batch axis takes the *global* batch's mean and variance,
because the program means the whole array (XLA adds the all-reduce), which is synchronized
BatchNorm, not the contract's default. So without --sync-bn each device's block is normalised
with its own statistics: the loss is ``vmap``-ped over the blocks, and the running statistics
are kept per device (a leading replica axis sharded like the batch; evaluation and the
exported weights use device 0's, as torch DDP and TF MirroredStrategy do). With --sync-bn the
blocks are one batch again and the statistics are global.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from parbench.contract.weights import load_weights
from parbench.run.job import Job
from parbench.run.loop import run_worker

from . import model, runtime, training
from .optim import make_optimizer

AXIS = "data"  # the mesh's one axis: the batch is split along it
PER_REPLICA_NOTE = ("BatchNorm normalises each device's rows with their own statistics (the "
                    "loss vmapped over the row blocks) and keeps running statistics per device; "
                    "evaluation and the exported weights use device 0's (as torch DDP's buffer "
                    "broadcast and TF MirroredStrategy keep replica 0's)")
GLOBAL_NOTE = ("--sync-bn: BatchNorm takes the global batch's statistics, a mean over the "
               "sharded batch axis that XLA all-reduces")


class Sharded(runtime.JaxStrategy):
    # --- setup: the device count and threads for JAX's backend to read when it starts, then
    # a 1-D mesh over the first N devices
    def __init__(self, job: Job):
        self.settings = runtime.configure(job)
        self.backend, devices = job.backend, runtime.local_devices(job.world_size)
        mesh = Mesh(np.array(devices), (AXIS,))
        self.rows = NamedSharding(mesh, P(AXIS))  # a leading axis split over the devices
        replicated = NamedSharding(mesh, P())
        # --- model: canonical weights, the shared optimizer rule and --clip-grad-norm; the
        # parameters and optimizer state replicated on every device; the running statistics
        # one entry per device (split like the batch), or replicated with --sync-bn
        self.spec, self.modes = job.spec, job.modes
        self.optimizer = make_optimizer(self.spec, job.optimizer_spec)
        self.clip = job.optimizer_spec.clip_grad_norm
        state = training.initial_state(self.spec, load_weights(job.weights_path), self.optimizer)
        self.stacked_stats = not self.modes.sync_bn
        if self.stacked_stats:
            state = state._replace(stats=training.copies(state.stats, len(devices)))
        placement = training.TrainState(params=replicated, opt_state=replicated,
                                       clipped=replicated,
                                       stats=self.rows if self.stacked_stats else replicated)
        self.state = jax.device_put(state, placement)
        self.devices = runtime.checked_replica_devices(self.state.params, job.world_size)
        self.sync_bn_layers = runtime.batchnorm_layers(state.stats) if self.modes.sync_bn else 0
        self.compiles, self.traced = runtime.CompileCounter(), {}
        self.notes = [GLOBAL_NOTE if self.modes.sync_bn else PER_REPLICA_NOTE] \
            if state.stats else []
        self.step = jax.jit(self.compiled_step, out_shardings=(placement, replicated),
                            donate_argnums=0)
        self.eval_step = runtime.evaluation(self.spec, stacked_stats=self.stacked_stats)
        # --- data shard: the one process reads every global batch; device d gets block d of
        # it ([N, B/N, ...], split along the mesh axis by its sharding)
        self.rank, self.num_processes = 0, 1

    # --- input: --input native is refused (JAX has no loader of its own): the base class says
    # so if it is ever asked

    # --- step: one program for the whole mesh: the global-batch loss's value_and_grad over
    # --grad-accum micro-batches (each device splits its own block), --clip-grad-norm and the
    # update; no collective written here: XLA sums the gradient across devices because the
    # parameters are replicated and the batch is not, inside each micro-batch (K all-reduces
    # per step). Reducing once would need each block's own gradient, and vmap makes those
    # grouped convolutions, which ran 2.3x slower here (porting doc section 14.4)
    def compiled_step(self, state: training.TrainState, x: jax.Array, y: jax.Array,
                      lr: jax.Array) -> tuple[training.TrainState, jax.Array]:
        parts = self.trace_step(x, state.params)
        loss_of = global_batch_loss if self.modes.sync_bn else per_block_loss
        loss, grads, stats = training.accumulated_gradient(
            partial(loss_of, self.spec), state.params, state.stats, x, y, parts, axis=1)
        return training.apply_update(self.optimizer, self.clip, state, grads, stats, lr), loss

    def train_step(self, x: np.ndarray, y: np.ndarray, lr: float) -> float:
        x, y = training.row_blocks(x, self.rows), training.row_blocks(y, self.rows)
        with self.compiles.counting():
            self.state, loss = self.step(self.state, x, y, np.float32(lr))
        return float(loss)

    # --- eval: the compiled forward in inference mode, on device 0 with its copy
    def evaluate(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
        predicted, loss_sum = self.eval_step(*self.replica_zero(), x, y)
        return np.asarray(predicted, np.int64), float(loss_sum)


def per_block_loss(spec, params: model.Params, stats: model.Stats, x: jax.Array,
                   y: jax.Array) -> tuple[jax.Array, model.Stats]:
    """The mean loss over [N, b, ...] row blocks with BatchNorm per block (each device's own
    statistics, and its own running statistics: ``stats`` has the same leading axis); the
    blocks are the same size, so the mean of their means is the global mean."""
    losses, stats = jax.vmap(partial(model.loss_fn, spec), in_axes=(None, 0, 0, 0))(
        params, stats, x, y)
    return jnp.mean(losses), stats


def global_batch_loss(spec, params: model.Params, stats: model.Stats, x: jax.Array,
                      y: jax.Array) -> tuple[jax.Array, model.Stats]:
    """The mean loss over [N, b, ...] row blocks taken as one batch of N*b rows in order:
    BatchNorm's statistics are the global batch's (--sync-bn, and the naive sharded program)."""
    return model.loss_fn(spec, params, stats, x.reshape(-1, *x.shape[2:]), y.reshape(-1))


def main(job: Job) -> None:
    run_worker(job, Sharded)
