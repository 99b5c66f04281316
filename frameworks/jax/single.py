"""jax-single: one process, one device, one ``jax.jit`` program per step. The baseline every JAX
strategy must match. The recipe and the step are the base class's (strategy.py); this file
places everything on the one device."""

from __future__ import annotations

from collections.abc import Callable

import jax
import numpy as np

from parbench.run.job import Job
from parbench.run.loop import run_worker

from . import runtime
from .strategy import JaxStrategy
from .training import TrainState


class SingleDevice(JaxStrategy):
    # --- setup: the one device (the base class has set JAX's device count and threads)
    def setup_devices(self, job: Job) -> list[jax.Device]:
        (self.device,) = runtime.local_devices(1)
        return [self.device]

    # --- model: canonical weights as (parameters, running statistics) and the optimizer
    # state, as loaded, on the device
    def place_state(self, state: TrainState, devices: list[jax.Device]) -> TrainState:
        return jax.device_put(state, self.device)

    # --- data shard: the one process reads every row of each global batch, all on the device
    def place_batch(self, rows: np.ndarray) -> jax.Array:
        return jax.device_put(rows, self.device)

    # --- input: --input native is refused (JAX has no loader of its own): the base class says
    # so if it is ever asked

    # --- step: one ``jax.jit`` program: the base class's step (the loss's value_and_grad over
    # --grad-accum micro-batches, --clip-grad-norm, the update), with nothing to combine
    def compile_step(self, devices: list[jax.Device]) -> Callable:
        return jax.jit(self.compiled_step, donate_argnums=0)

    # --- eval: the base class's compiled forward in inference mode, on the device


def main(job: Job) -> None:
    run_worker(job, SingleDevice)
