"""jax-pmap: ``jax.pmap``, one process driving N devices (logical CPU devices on a CPU), with
the collectives written out.

Every device holds a copy of the parameters, the optimizer state and the BatchNorm running
statistics (stacked on a leading replica axis, one entry per device). Each step the process
reads the whole global batch and device d gets rows ``[d*B/N, (d+1)*B/N)``, the contract's
shard d. Each device's loss is the mean over *its* rows, so ``lax.pmean`` of the gradients is
the gradient of the global-batch mean (the shards are the same size); --clip-grad-norm clips
that averaged gradient, so every device scales by the same factor and the copies stay equal.
BatchNorm normalises each shard with its own statistics (as torch DDP and TF MirroredStrategy
do by default); with --sync-bn the statistics are averaged over the pmap axis (the global
batch's). The running statistics stay per device; evaluation and the exported weights use
device 0's, as DDP's buffer broadcast and MirroredStrategy do.

The recipe and the step's skeleton are the base class's (strategy.py); this file holds what
pmap adds to it.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from parbench.run.job import Job
from parbench.run.loop import run_worker

from . import runtime, training
from .layers import Params
from .strategy import JaxStrategy
from .training import LossOf, TrainState

AXIS = "replicas"  # the pmap axis: lax.pmean and synchronized BatchNorm reduce over it
STATS_NOTE = ("BatchNorm running statistics are kept per device; evaluation and the exported "
              "weights use device 0's (as torch DDP's buffer broadcast and TF "
              "MirroredStrategy keep replica 0's)")


class Pmap(JaxStrategy):
    # --- setup: the first N devices, and a leading axis of N entries, entry d on device d:
    # how pmap holds per-device values
    def setup_devices(self, job: Job) -> list[jax.Device]:
        devices = runtime.local_devices(job.world_size)
        self.per_device = NamedSharding(Mesh(np.array(devices), (AXIS,)), P(AXIS))
        return devices

    # --- model: the parameters, optimizer state and running statistics copied to every
    # device, stacked on pmap's leading axis
    stacked_params = stacked_stats = True

    def place_state(self, state: TrainState, devices: list[jax.Device]) -> TrainState:
        return jax.device_put(training.copies(state, len(devices)), self.per_device)

    def stats_note(self) -> str:
        return STATS_NOTE

    # --- data shard: the one process reads every global batch; device d gets block d of
    # it (reshaped to [N, B/N, ...], placed entry by entry)
    def place_batch(self, rows: np.ndarray) -> jax.Array:
        return training.row_blocks(rows, self.per_device)

    # --- input: --input native is refused (JAX has no loader of its own): the base class says
    # so if it is ever asked

    # --- step: the base class's step on each device, over its shard; the loss's
    # value_and_grad over --grad-accum micro-batches, then one explicit pmean of the
    # gradients and the loss across devices, --clip-grad-norm on that global-batch gradient,
    # the update on every copy; lr is one value for every device (in_axes None)
    def compile_step(self, devices: list[jax.Device]) -> Callable:
        return jax.pmap(self.compiled_step, axis_name=AXIS, in_axes=(0, 0, 0, None),
                        devices=devices, donate_argnums=0)

    def step_loss(self) -> LossOf:
        return self.model_loss(AXIS if self.modes.sync_bn else None)  # --sync-bn: global stats

    def global_mean(self, grads: Params, loss: jax.Array) -> tuple[Params, jax.Array]:
        return lax.pmean((grads, loss), AXIS)  # means of equal shards: the global mean

    def host_loss(self, loss: jax.Array) -> float:
        return float(np.asarray(loss.addressable_shards[0].data)[0])  # every entry the same

    # --- eval: the base class's compiled forward in inference mode, on device 0 with its copy


def main(job: Job) -> None:
    run_worker(job, Pmap)
