"""jax-single: one process, one device, one ``jax.jit`` program per step. The baseline every JAX
strategy must match."""

from __future__ import annotations

from functools import partial

import jax
import numpy as np

from parbench.contract.weights import load_weights
from parbench.run.job import Job
from parbench.run.loop import run_worker

from . import model, runtime, training
from .optim import make_optimizer


class SingleDevice(runtime.JaxStrategy):
    # --- setup: the device count and threads for JAX's backend to read when it starts, then
    # the one device
    def __init__(self, job: Job):
        self.settings = runtime.configure(job)
        self.backend, (self.device,) = job.backend, runtime.local_devices(1)
        # --- model: canonical weights as (parameters, running statistics), the shared
        # optimizer rule (--optimizer, --clip-grad-norm), all on the device
        self.spec, self.modes = job.spec, job.modes
        self.optimizer = make_optimizer(self.spec, job.optimizer_spec)
        self.clip = job.optimizer_spec.clip_grad_norm
        state = training.initial_state(self.spec, load_weights(job.weights_path), self.optimizer)
        self.state = jax.device_put(state, self.device)
        self.devices = runtime.checked_replica_devices(self.state.params, 1)
        self.compiles, self.traced, self.notes = runtime.CompileCounter(), {}, []
        self.step = jax.jit(self.compiled_step, donate_argnums=0)
        self.eval_step = runtime.evaluation(self.spec)
        # --- data shard: the one process reads every row of each global batch
        self.rank, self.num_processes = 0, 1

    # --- input: --input native is refused (JAX has no loader of its own): the base class says
    # so if it is ever asked

    # --- step: one compiled program: the loss's value_and_grad over --grad-accum micro-batches,
    # --clip-grad-norm, the update; lr is an argument, so a new rate does not recompile
    def compiled_step(self, state: training.TrainState, x: jax.Array, y: jax.Array,
                      lr: jax.Array) -> tuple[training.TrainState, jax.Array]:
        parts = self.trace_step(x, state.params)
        loss_of = partial(model.loss_fn, self.spec)  # (params, stats, x, y) -> (loss, stats)
        loss, grads, stats = training.accumulated_gradient(loss_of, state.params, state.stats,
                                                          x, y, parts)
        return training.apply_update(self.optimizer, self.clip, state, grads, stats, lr), loss

    def train_step(self, x: np.ndarray, y: np.ndarray, lr: float) -> float:
        x, y = jax.device_put(x, self.device), jax.device_put(y, self.device)
        with self.compiles.counting():
            self.state, loss = self.step(self.state, x, y, np.float32(lr))
        return float(loss)

    # --- eval: the compiled forward in inference mode, on the device
    def evaluate(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
        predicted, loss_sum = self.eval_step(*self.replica_zero(), x, y)
        return np.asarray(predicted, np.int64), float(loss_sum)


def main(job: Job) -> None:
    run_worker(job, SingleDevice)
