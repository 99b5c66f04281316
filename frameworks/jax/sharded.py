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

The recipe and the step's skeleton are the base class's (strategy.py); this file holds what
jit over a mesh adds to it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from parbench.run.job import Job
from parbench.run.loop import run_worker

from . import runtime, training
from .layers import Params, Stats
from .strategy import JaxStrategy
from .training import LossOf, TrainState

AXIS = "data"  # the mesh's one axis: the batch is split along it
PER_REPLICA_NOTE = ("BatchNorm normalises each device's rows with their own statistics (the "
                    "loss vmapped over the row blocks) and keeps running statistics per device; "
                    "evaluation and the exported weights use device 0's (as torch DDP's buffer "
                    "broadcast and TF MirroredStrategy keep replica 0's)")
GLOBAL_NOTE = ("--sync-bn: BatchNorm takes the global batch's statistics, a mean over the "
               "sharded batch axis that XLA all-reduces")


class Sharded(JaxStrategy):
    # --- setup: a 1-D mesh over the first N devices, and its two shardings: a leading axis
    # split over the devices, and replicated on every one
    def setup_devices(self, job: Job) -> list[jax.Device]:
        devices = runtime.local_devices(job.world_size)
        mesh = Mesh(np.array(devices), (AXIS,))
        self.rows = NamedSharding(mesh, P(AXIS))  # a leading axis split over the devices
        self.replicated = NamedSharding(mesh, P())
        return devices

    # --- model: the parameters and optimizer state replicated on every device; the running
    # statistics one entry per device (split like the batch), or replicated with --sync-bn
    @property
    def stacked_stats(self) -> bool:
        return not self.modes.sync_bn

    def state_placement(self) -> TrainState:
        """The sharding of each part of the state, where the step keeps it."""
        stats = self.rows if self.stacked_stats else self.replicated
        return TrainState(params=self.replicated, stats=stats, opt_state=self.replicated,
                          clipped=self.replicated)

    def place_state(self, state: TrainState, devices: list[jax.Device]) -> TrainState:
        if self.stacked_stats:
            state = state._replace(stats=training.copies(state.stats, len(devices)))
        return jax.device_put(state, self.state_placement())

    def stats_note(self) -> str:
        return GLOBAL_NOTE if self.modes.sync_bn else PER_REPLICA_NOTE

    # --- data shard: the one process reads every global batch; device d gets block d of
    # it ([N, B/N, ...], split along the mesh axis by its sharding)
    def place_batch(self, rows: np.ndarray) -> jax.Array:
        return training.row_blocks(rows, self.rows)

    # --- input: --input native is refused (JAX has no loader of its own): the base class says
    # so if it is ever asked

    # --- step: one program for the whole mesh: the global-batch loss's value_and_grad over
    # --grad-accum micro-batches (each device splits its own block), --clip-grad-norm and the
    # update; no collective written here: XLA sums the gradient across devices because the
    # parameters are replicated and the batch is not, inside each micro-batch (K all-reduces
    # per step). Reducing once would need each block's own gradient, and vmap makes those
    # grouped convolutions, which ran 2.3x slower here (porting doc section 14.4)
    def compile_step(self, devices: list[jax.Device]) -> Callable:
        # the new state stays where the old one was; the loss, a global mean, replicated
        return jax.jit(self.compiled_step, out_shardings=(self.state_placement(), self.replicated),
                       donate_argnums=0)

    micro_batch_axis = 1  # [N, b, ...]: micro-batches of each device's block, not of blocks

    def step_loss(self) -> LossOf:
        loss_of = global_batch_loss if self.modes.sync_bn else per_block_loss
        return partial(loss_of, self.model_loss())

    # --- eval: the base class's compiled forward in inference mode, on device 0 with its copy


def per_block_loss(loss_of: LossOf, params: Params, stats: Stats, x: jax.Array,
                   y: jax.Array) -> tuple[jax.Array, Stats]:
    """The mean of ``loss_of`` over [N, b, ...] row blocks with BatchNorm per block (each
    device's own statistics, and its own running statistics: ``stats`` has the same leading
    axis); the blocks are the same size, so the mean of their means is the global mean."""
    losses, stats = jax.vmap(loss_of, in_axes=(None, 0, 0, 0))(params, stats, x, y)
    return jnp.mean(losses), stats


def global_batch_loss(loss_of: LossOf, params: Params, stats: Stats, x: jax.Array,
                      y: jax.Array) -> tuple[jax.Array, Stats]:
    """``loss_of`` over [N, b, ...] row blocks taken as one batch of N*b rows in order:
    BatchNorm's statistics are the global batch's (--sync-bn, and the naive sharded program).
    Labels keep their own trailing axes (a language model's [N, b, T] become [N*b, T])."""
    return loss_of(params, stats, x.reshape(-1, *x.shape[2:]), y.reshape(-1, *y.shape[2:]))


def main(job: Job) -> None:
    run_worker(job, Sharded)
