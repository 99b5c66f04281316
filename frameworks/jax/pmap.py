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
"""

from __future__ import annotations

from functools import partial

import jax
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from parbench.contract.weights import load_weights
from parbench.run.job import Job
from parbench.run.loop import run_worker

from . import model, runtime, training
from .optim import make_optimizer

AXIS = "replicas"  # the pmap axis: lax.pmean and synchronized BatchNorm reduce over it
STATS_NOTE = ("BatchNorm running statistics are kept per device; evaluation and the exported "
              "weights use device 0's (as torch DDP's buffer broadcast and TF "
              "MirroredStrategy keep replica 0's)")


class Pmap(runtime.JaxStrategy):
    # --- setup: the device count and threads for JAX's backend to read when it starts, then
    # the first N devices
    def __init__(self, job: Job):
        self.settings = runtime.configure(job)
        self.backend, devices = job.backend, runtime.local_devices(job.world_size)
        # a leading axis of N entries, entry d on device d: how pmap holds per-device values
        self.per_device = NamedSharding(Mesh(np.array(devices), (AXIS,)), P(AXIS))
        # --- model: canonical weights, the shared optimizer rule and --clip-grad-norm; the
        # parameters, optimizer state and running statistics copied to every device
        self.spec, self.modes = job.spec, job.modes
        self.optimizer = make_optimizer(self.spec, job.optimizer_spec)
        self.clip = job.optimizer_spec.clip_grad_norm
        state = training.initial_state(self.spec, load_weights(job.weights_path), self.optimizer)
        self.state = jax.device_put(training.copies(state, len(devices)), self.per_device)
        self.stacked_params = self.stacked_stats = True
        self.devices = runtime.checked_replica_devices(self.state.params, job.world_size)
        self.sync_bn_layers = runtime.batchnorm_layers(state.stats) if self.modes.sync_bn else 0
        self.compiles, self.traced = runtime.CompileCounter(), {}
        self.notes = [STATS_NOTE] if state.stats else []
        self.step = jax.pmap(self.compiled_step, axis_name=AXIS, in_axes=(0, 0, 0, None),
                             devices=devices, donate_argnums=0)
        self.eval_step = runtime.evaluation(self.spec, stacked_params=True, stacked_stats=True)
        # --- data shard: the one process reads every global batch; device d gets block d of
        # it (reshaped to [N, B/N, ...], placed entry by entry)
        self.rank, self.num_processes = 0, 1

    # --- input: --input native is refused (JAX has no loader of its own): the base class says
    # so if it is ever asked

    # --- step: each device its shard; the loss's value_and_grad over --grad-accum
    # micro-batches, then one explicit pmean of the gradients and the loss across devices,
    # --clip-grad-norm on that global-batch gradient, the update on every copy
    def compiled_step(self, state: training.TrainState, x: jax.Array, y: jax.Array,
                      lr: jax.Array) -> tuple[training.TrainState, jax.Array]:
        parts = self.trace_step(x, state.params)
        sync_axis = AXIS if self.modes.sync_bn else None  # --sync-bn: the global statistics
        loss_of = partial(model.loss_fn, self.spec, sync_axis=sync_axis)
        loss, grads, stats = training.accumulated_gradient(loss_of, state.params, state.stats,
                                                          x, y, parts)
        grads, loss = lax.pmean((grads, loss), AXIS)  # means of equal shards: the global mean
        return training.apply_update(self.optimizer, self.clip, state, grads, stats, lr), loss

    def train_step(self, x: np.ndarray, y: np.ndarray, lr: float) -> float:
        x, y = training.row_blocks(x, self.per_device), training.row_blocks(y, self.per_device)
        with self.compiles.counting():
            self.state, loss = self.step(self.state, x, y, np.float32(lr))
        return float(np.asarray(loss.addressable_shards[0].data)[0])  # every entry the same

    # --- eval: the compiled forward in inference mode, on device 0 with its copy
    def evaluate(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
        predicted, loss_sum = self.eval_step(*self.replica_zero(), x, y)
        return np.asarray(predicted, np.int64), float(loss_sum)


def main(job: Job) -> None:
    run_worker(job, Pmap)
