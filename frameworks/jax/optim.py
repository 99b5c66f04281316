"""The shared optimizers (parbench.contract.optim) and --clip-grad-norm as pure JAX functions.

jax and numpy only (no optax dependency), so the rules are written out here, each exactly
parbench.contract.optim's text:

* ``sgd``: ``g = grad + wd * p``, ``buf = momentum * buf + g`` (buf starts at 0), ``p -= lr *
  buf``, on every trainable tensor;
* ``adamw``: ``p *= 1 - lr * wd`` on the tensors whose role decays, then Adam with eps on the
  bias-corrected root, step t counted from 1.

``make_optimizer(model_spec, rule)`` returns an ``Optimizer``: ``init(params)`` and
``update(grads, state, params, lr) -> (params, state)``, both pure and jit-able, with ``lr`` a
traced scalar (a new rate per step does not recompile). ``clip`` is --clip-grad-norm.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from parbench.contract.optim import CLIP_EPS, OptimizerSpec
from parbench.contract.spec import ModelSpec, parameters

from .model import Params

OptState = dict[str, Any]  # a pytree: "momentum" (sgd); "step", "m", "v" (adamw)


class Optimizer(NamedTuple):
    init: Callable[[Params], OptState]
    update: Callable[[Params, OptState, Params, jax.Array | float], tuple[Params, OptState]]


def _zeros(params: Params) -> Params:
    return {name: jnp.zeros_like(p) for name, p in params.items()}


def sgd(rule: OptimizerSpec) -> Optimizer:
    """torch's SGD (dampening 0, no nesterov) with L2 decay on every trainable tensor."""
    momentum, weight_decay = rule.momentum, rule.weight_decay

    def init(params: Params) -> OptState:
        return {"momentum": _zeros(params)}

    def update(grads: Params, state: OptState, params: Params,
               lr: jax.Array | float) -> tuple[Params, OptState]:
        buffers, new_params = {}, {}
        for name, p in params.items():
            g = grads[name] + weight_decay * p
            buffers[name] = momentum * state["momentum"][name] + g
            new_params[name] = p - lr * buffers[name]
        return new_params, {"momentum": buffers}

    return Optimizer(init, update)


def _one_minus_power(beta: float, t: jax.Array) -> jax.Array:
    """``1 - beta**t`` in float32 to float32's precision. The direct form loses it: float32
    holds 0.999 as 0.99900001, so ``1 - beta2`` comes out 1.3e-5 off before any power (torch
    and the numpy rule take these in float64); ``-expm1(t * log(beta))`` is accurate to
    rounding for every t."""
    return -jnp.expm1(t * jnp.float32(math.log(beta)))


def adamw(rule: OptimizerSpec, decays: dict[str, bool]) -> Optimizer:
    """torch's AdamW (amsgrad off); ``decays``: canonical name -> whether the decoupled weight
    decay applies (parbench.contract.spec ``Param.decays``)."""
    beta1, beta2, eps, weight_decay = rule.beta1, rule.beta2, rule.eps, rule.weight_decay

    def init(params: Params) -> OptState:
        return {"step": jnp.zeros((), jnp.int32), "m": _zeros(params), "v": _zeros(params)}

    def update(grads: Params, state: OptState, params: Params,
               lr: jax.Array | float) -> tuple[Params, OptState]:
        step = state["step"] + 1
        t = step.astype(jnp.float32)
        correction1 = _one_minus_power(beta1, t)
        root_correction2 = jnp.sqrt(_one_minus_power(beta2, t))
        new_params, ms, vs = {}, {}, {}
        for name, p in params.items():
            g = grads[name]
            if decays[name]:  # a name outside the spec: KeyError, not a guess
                p = p * (1 - lr * weight_decay)
            ms[name] = beta1 * state["m"][name] + (1 - beta1) * g
            vs[name] = beta2 * state["v"][name] + (1 - beta2) * jnp.square(g)
            denominator = jnp.sqrt(vs[name]) / root_correction2 + eps
            new_params[name] = p - lr / correction1 * ms[name] / denominator
        return new_params, {"step": step, "m": ms, "v": vs}

    return Optimizer(init, update)


def make_optimizer(spec: ModelSpec, optimizer: OptimizerSpec) -> Optimizer:
    """The run's optimizer (--optimizer) for ``spec``'s trainable tensors."""
    if optimizer.name == "sgd":
        return sgd(optimizer)
    if optimizer.name == "adamw":
        decays = {name: param.decays for name, param in parameters(spec).items()
                  if param.trainable}
        return adamw(optimizer, decays)
    raise ValueError(f"JAX has no optimizer {optimizer.name!r}")


def global_norm(grads: Params) -> jax.Array:
    """The L2 norm over every tensor, as torch's clip_grad_norm_ takes it: the norm of the
    tensors' norms."""
    return jnp.linalg.norm(jnp.stack([jnp.linalg.norm(g.ravel()) for g in grads.values()]))


def clip(grads: Params, max_norm: float) -> tuple[Params, jax.Array]:
    """--clip-grad-norm: ``grads * min(1, C / (norm + 1e-6))`` (parbench.contract.optim's rule, torch's
    formula), and whether the norm exceeded C (a finite norm only: an overflowed step is not
    a clipped one). Call it on the global-batch gradient, after the devices' are combined."""
    norm = global_norm(grads)
    coefficient = jnp.minimum(1.0, max_norm / (norm + CLIP_EPS))
    clipped = jnp.logical_and(norm > max_norm, jnp.isfinite(norm))
    return {name: g * coefficient for name, g in grads.items()}, clipped
