"""The pieces every JAX strategy's compiled step is built from: what a step carries
(``TrainState``), micro-batches (--grad-accum), clipping and the update, and placing a
process's rows on the devices as the contract's shards."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax

from . import model
from .layers import Params, Stats
from .optim import clipped, with_learning_rate


class TrainState(NamedTuple):
    """What a step carries from one step to the next, on the devices."""

    params: Params
    stats: Stats  # BatchNorm running statistics
    opt_state: optax.OptState
    clipped: jax.Array  # int32: steps whose gradient --clip-grad-norm shrank so far


def initial_state(spec, weights: dict[str, np.ndarray],
                  optimizer: optax.GradientTransformation) -> TrainState:
    params, stats = model.split_weights(spec, weights)
    return TrainState(params, stats, optimizer.init(params), jnp.zeros((), jnp.int32))


def copies(tree, count: int):
    """``count`` copies of each array of ``tree``, stacked on a new leading axis (host numpy,
    for ``jax.device_put`` to place entry d on device d)."""
    return jax.tree.map(lambda a: np.broadcast_to(a, (count, *np.shape(a))), tree)


def micro_split(array: jax.Array, parts: int, axis: int) -> jax.Array:
    """``array``'s rows along ``axis`` as ``parts`` contiguous micro-batches, stacked first:
    [B, ...] -> [parts, B / parts, ...] (axis 0), or [R, b, ...] -> [parts, R, b / parts, ...]
    (axis 1: each replica R splits its own rows)."""
    shape = array.shape
    split = array.reshape(*shape[:axis], parts, shape[axis] // parts, *shape[axis + 1:])
    return jnp.moveaxis(split, axis, 0)


# (params, stats, x, y) -> (mean loss over the rows given, statistics after the pass)
LossOf = Callable[[Params, Stats, jax.Array, jax.Array], tuple[jax.Array, Stats]]


def accumulated_gradient(loss_of: LossOf, params: Params, stats: Stats,
                         x: jax.Array, y: jax.Array, parts: int,
                         axis: int = 0) -> tuple[jax.Array, Params, Stats, int]:
    """(mean loss, its gradient, running statistics after the pass, the forward and backward
    passes the program makes) of ``loss_of`` over ``parts`` micro-batches (--grad-accum): each
    micro-batch's forward and backward in turn (``lax.scan``, BatchNorm statistics threaded
    through in order, as torch's K forwards update them), gradients and losses averaged, which
    is the gradient of the mean over all rows because the micro-batches are the same size. One
    micro-batch: one plain pass. The passes are the scan's length, read off the stacked
    micro-batches it runs over (what ``Observed.micro_batches`` reports), not ``parts``."""
    value_and_grad = jax.value_and_grad(loss_of, has_aux=True)
    if parts == 1:
        (loss, stats), grads = value_and_grad(params, stats, x, y)
        return loss, grads, stats, 1

    def micro_step(carry, batch):
        loss_sum, grad_sum, stats = carry
        (loss, stats), grads = value_and_grad(params, stats, *batch)
        return (loss_sum + loss, jax.tree.map(jnp.add, grad_sum, grads), stats), None

    start = (jnp.zeros((), jnp.float32), jax.tree.map(jnp.zeros_like, params), stats)
    batches = (micro_split(x, parts, axis), micro_split(y, parts, axis))
    (loss_sum, grad_sum, stats), _ = lax.scan(micro_step, start, batches)
    passes = batches[0].shape[0]
    return loss_sum / passes, jax.tree.map(lambda g: g / passes, grad_sum), stats, passes


def apply_update(optimizer: optax.GradientTransformation, max_norm: float | None,
                 state: TrainState, grads: Params, stats: Stats, lr: jax.Array) -> TrainState:
    """The run's Optax chain at this step's ``lr`` (call it with the global batch's gradient,
    after the devices' are combined: --clip-grad-norm is the chain's first link), counting the
    steps whose gradient the clip shrinks."""
    count = state.clipped
    if max_norm is not None:
        count = count + clipped(grads, max_norm).astype(jnp.int32)
    updates, opt_state = optimizer.update(grads, with_learning_rate(state.opt_state, lr),
                                          state.params)
    return TrainState(optax.apply_updates(state.params, updates), stats, opt_state, count)


def row_blocks(rows: np.ndarray, sharding: jax.sharding.NamedSharding) -> jax.Array:
    """A process's rows as [N, rows / N, ...] on the N devices of ``sharding`` (a leading axis
    split over them): device d gets block d, rows [d*B/N, (d+1)*B/N), the contract's shard d
    (parbench.batches.shard_slice)."""
    blocks = sharding.mesh.size
    return jax.device_put(rows.reshape(blocks, -1, *rows.shape[1:]), sharding)
