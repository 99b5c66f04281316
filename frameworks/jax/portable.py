"""JAX's training state as a portable checkpoint's (parbench.run.portable), and back.

The Optax chains (optim.py) keep the contract's quantities: ``optax.sgd``'s ``trace`` is
torch's momentum buffer, ``scale_by_adam``'s ``mu`` and ``nu`` are ``exp_avg`` and
``exp_avg_sq``. Each is a tree of the parameters' structure, in Flax's layouts (conv kernels
HWIO, dense kernels [in, out]), mapped by each leaf's path like the weights
(layers.to_canonical, to_flax). The step count t is a ``count`` in two places of the state:
Adam's bias correction and ``inject_hyperparams``' own; both equal the steps taken, and a load
sets both.

A load builds the state on the host, as a fresh run's initial state is built, and places it
with the strategy's own ``place_state``: replicated, sharded (jax-fsdp) or stacked per device
(jax-pmap) as the strategy keeps it. An export reads the state whole (``jax.device_get``; a
stacked tree's entry 0): what ``parbench convert`` runs, on the 1-device backend.
"""

from __future__ import annotations

import jax
import numpy as np
import optax

from parbench.contract.spec import ModelSpec, parameters
from parbench.run.portable import SLOTS, TrainingState

from .layers import canonical_name, to_canonical
from .model import split_weights
from .training import TrainState

FIELDS = {"momentum_buffer": "trace", "exp_avg": "mu", "exp_avg_sq": "nu"}  # in Optax's states
MOMENT_STATES = (optax.TraceState, optax.ScaleByAdamState)


def _trainable(spec: ModelSpec) -> list[str]:
    return [name for name, param in parameters(spec).items() if param.trainable]


def _canonical(tree, names: list[str]) -> dict[str, np.ndarray]:
    """A tree of the parameters' structure as canonical name -> array, for ``names``."""
    arrays = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        keys = tuple(key.key for key in path if isinstance(key, jax.tree_util.DictKey))
        arrays[canonical_name(keys)] = to_canonical(keys, np.asarray(leaf))
    return {name: np.array(arrays[name], np.float32) for name in names}


def portable_state(spec: ModelSpec, weights: dict[str, np.ndarray], opt_state, rule: str,
                   step: int) -> TrainingState:
    """The state after ``step`` steps from the exported ``weights`` and the host ``opt_state``."""
    counts = {int(count) for _, count in optax.tree.get_all_with_path(opt_state, "count")}
    if counts - {step}:
        raise ValueError(f"JAX's optimizer state counts {sorted(counts)} steps; the checkpoint "
                         f"says {step}")
    trained = _trainable(spec)
    slots = {slot: _canonical(optax.tree.get(opt_state, FIELDS[slot]), trained)
             for slot in SLOTS[rule]}
    return TrainingState(weights, slots, step)


def host_state(spec: ModelSpec, optimizer: optax.GradientTransformation,
               state: TrainingState) -> TrainState:
    """``state`` as a TrainState of host arrays, before the strategy places it."""
    params, stats = split_weights(spec, state.weights)
    opt_state = optimizer.init(params)
    statistics = {name: array for name, array in state.weights.items()
                  if name not in state.slots[next(iter(state.slots))]}
    moments = {FIELDS[slot]: split_weights(spec, {**statistics, **arrays})[0]
               for slot, arrays in state.slots.items()}
    count = np.asarray(state.step, np.int32)

    def replaced(node):
        if not isinstance(node, MOMENT_STATES):
            return node
        return node._replace(**{key: value for key, value in {**moments, "count": count}.items()
                                if key in node._fields})

    # not optax.tree.set: given trace=<tree> and count=<t> at once, optax 0.2.8 set the count
    # and left the trace as it was (measured)
    opt_state = jax.tree.map(replaced, opt_state,
                             is_leaf=lambda node: isinstance(node, MOMENT_STATES))
    return TrainState(params, stats, opt_state._replace(count=count), np.zeros((), np.int32))
