"""Checkpoints in Orbax, JAX's checkpoint library (the folder's layout and the loop's side:
parbench.run.checkpoint).

What is saved is the whole ``TrainState`` (training.py): the parameters, the BatchNorm running
statistics, the Optax state (AdamW's moments and its step count, SGD's momentum,
inject_hyperparams' count and learning rate) and the count of clipped steps. JAX keeps no
random state: nothing in training draws a random number (no dropout; the order of the rows is
the contract's) and no strategy holds a PRNG key, so there is none to save.

``ocp.StandardCheckpointer`` writes each ``jax.Array`` as its sharding places it: every process
writes the shards it holds (a replicated array once), so jax-fsdp never gathers a whole array
and jax-multiprocess's processes each write their own; the save is collective, so every
process calls it. It restores into the shardings of the abstract arrays it is given, this
strategy's own, and so reshards: a checkpoint of one strategy loads in any other, on any number
of devices or processes.

A stacked array (a leading replica axis, entry d on device d: jax-pmap's whole state, the
per-device running statistics of jax-sharded, jax-fsdp and jax-multiprocess) is not saved as it
is, though Orbax would take it (JAX 0.10's pmap returns NamedSharding arrays): its length is
the device count, which would tie the checkpoint to that count. Replica 0's copy is saved, and
copied to every replica on load. The parameters and the optimizer state are alike on every
replica (each applies the same averaged gradient); the running statistics are not (each
device's follow its own rows), but no step reads them (BatchNorm trains on the batch's
statistics), and evaluation and the exported weights read device 0's, as torch DDP's buffer
broadcast makes rank 0's the model's. So a resumed run's device 0 continues exactly, and the
other devices' statistics restart from device 0's, which nothing reads (measured: a resumed
jax-pmap resnet's losses and weights equal the whole run's, bit for bit).
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from .training import TrainState


def save(folder: Path, state: TrainState, stacked: TrainState) -> None:
    """``state`` into ``folder`` (which must not exist: Orbax writes a temporary folder beside
    it and renames it), replica 0's copy of each part that ``stacked`` marks; every process
    calls it. Returns when the files are written: Orbax writes in a thread of its own, and the
    loop renames the folder above as soon as every process returns."""
    whole = TrainState(*(_replica_zero(part) if is_stacked else part
                         for part, is_stacked in zip(state, stacked)))
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(folder, whole)
        checkpointer.wait_until_finished()


def load(folder: Path, state: TrainState, stacked: TrainState) -> TrainState:
    """What ``save`` wrote, in the placement of ``state`` (this strategy's): each array read
    into its sharding (Orbax reshards), the parts ``stacked`` marks into replica 0's and copied
    to every replica; every process calls it."""
    target = TrainState(*(jax.tree.map(_entry_abstract if is_stacked else _abstract, part)
                          for part, is_stacked in zip(state, stacked)))
    with ocp.StandardCheckpointer() as checkpointer:
        whole = checkpointer.restore(folder, target)
    return TrainState(*(_restack(part, like) if is_stacked else part
                        for part, like, is_stacked in zip(whole, state, stacked)))


def _replicated(array: jax.Array) -> NamedSharding:
    """Replicated on the devices that ``array``'s replica axis spans."""
    return NamedSharding(array.sharding.mesh, P())


def _replica_zero(tree):
    """Entry 0 of each stacked array of ``tree``, replicated on its replicas' devices (one
    program over them, which every process of jax-multiprocess runs)."""
    return jax.jit(_entries_zero, out_shardings=jax.tree.map(_replicated, tree))(tree)


def _entries_zero(tree):
    """A function of the module's, not a lambda: jit keeps its compilation for the next
    checkpoint (measured: a new lambda compiled again at every save, 2.4 s of jax-pmap's
    resnet state on 2 busy cores; cached, 0.03 s)."""
    return jax.tree.map(lambda a: a[0], tree)


def _restack(tree, like):
    """``tree``'s arrays stacked as ``like``'s, one copy per replica, in ``like``'s shardings."""
    return jax.jit(lambda t: jax.tree.map(lambda a, s: jnp.broadcast_to(a, s.shape), t, like),
                   out_shardings=jax.tree.map(lambda a: a.sharding, like))(tree)


def _abstract(array: jax.Array) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(array.shape, array.dtype, sharding=array.sharding)


def _entry_abstract(array: jax.Array) -> jax.ShapeDtypeStruct:
    """One entry of a stacked array, replicated as ``_replica_zero`` saves it."""
    return jax.ShapeDtypeStruct(array.shape[1:], array.dtype, sharding=_replicated(array))
