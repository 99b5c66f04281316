"""jax-fsdp: fully sharded data parallelism as JAX users write it: jax-sharded's one ``jax.jit``
program over a 1-D device mesh, with the parameters and the optimizer state also split along
the mesh's ``data`` axis (``NamedSharding(mesh, P("data"))`` on each array's first axis that N
divides). Each device holds 1/N of every sharded array; the compiler (GSPMD) gathers the
parameters where the forward and backward need them and reduces each gradient to the devices
that hold its shard, with no collective written here. Which collectives it picks is its own
choice (on CPU, XLA 0.10 all-reduces the gradients and slices them, rather than a
reduce-scatter: the record's communication is read off the compiled program).

Everything else (the batch split across the devices, per-device BatchNorm statistics, the step)
is jax-sharded's (sharded.py); this file holds what sharding the state adds to it.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from parbench.run.job import Job
from parbench.run.loop import run_worker

from . import model, runtime
from .layers import Params, Stats
from .sharded import AXIS, Sharded
from .training import TrainState


class FullySharded(Sharded):
    # --- setup: jax-sharded's 1-D mesh and its two shardings (a leading axis split, and
    # replicated)

    # --- model: each parameter and each optimizer-state array split along its first axis
    # that the device count divides (a scalar, or an array with no such axis, replicated); the
    # running statistics per device, as in jax-sharded
    def place_state(self, state: TrainState, devices: list[jax.Device]) -> TrainState:
        mesh = self.rows.mesh
        self.placement = TrainState(params=split_placement(state.params, mesh),
                                    stats=self.rows if self.stacked_stats else self.replicated,
                                    opt_state=split_placement(state.opt_state, mesh),
                                    clipped=self.replicated)
        sharded = sum(placement.spec != P() for placement in jax.tree.leaves(
            self.placement.params, is_leaf=lambda leaf: isinstance(leaf, NamedSharding)))
        arrays = len(jax.tree.leaves(state.params))
        self.sharding_note = (f"{sharded} of {arrays} parameter arrays split over {mesh.size} "
                              f"devices (the rest have no axis {mesh.size} divides: replicated)")
        return super().place_state(state, devices)

    def state_placement(self) -> TrainState:
        return self.placement

    def describe(self) -> dict:
        """The record's notes say how many parameter arrays are split (its state_bytes, how
        much each device holds)."""
        return runtime.describe(self.devices, self.settings, [*self.notes, self.sharding_note])

    # --- data shard: device d gets block d of each global batch (jax-sharded's)

    # --- step: jax-sharded's program; its out_shardings keep the new state split as the old

    # --- eval: the whole parameters gathered onto the first device, with its running
    # statistics
    def replica_zero(self) -> tuple[Params, Stats]:
        first = self.devices[0]
        whole = jax.device_put(self.state.params, first)  # gathers each split array
        return whole, super().replica_zero()[1]

    # --- export: the whole parameters (numpy gathers every shard), the first device's
    # running statistics
    def export_weights(self) -> dict[str, np.ndarray]:
        return model.export_weights(
            self.spec, jax.tree.map(np.asarray, self.state.params),
            runtime.host_copy(self.state.stats, self.devices[0], self.stacked_stats))


def split_placement(tree, mesh: jax.sharding.Mesh):
    """A NamedSharding per array of ``tree``: split along its first axis the mesh's size
    divides, or replicated where none does."""
    def placement(array) -> NamedSharding:
        for axis, length in enumerate(np.shape(array)):
            if length % mesh.size == 0:
                return NamedSharding(mesh, P(*([None] * axis), AXIS))
        return NamedSharding(mesh, P())

    return jax.tree.map(placement, tree)


def main(job: Job) -> None:
    run_worker(job, FullySharded)
