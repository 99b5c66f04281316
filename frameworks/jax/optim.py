"""The shared optimizers (parbench.contract.optim) and --clip-grad-norm as Optax chains.

* ``sgd``: ``add_decayed_weights`` (L2: ``g + wd * p``) then ``optax.sgd`` with momentum, whose
  trace is torch's buffer (``buf = momentum * buf + g``, starting at 0) and whose step is
  ``p - lr * buf``: the rule's arithmetic, operation for operation;
* ``adamw``: ``optax.adamw``'s chain (Adam's scaling, ``add_decayed_weights``, the learning
  rate) with the decoupled decay masked to the tensors whose role decays (parbench.contract.spec
  ``Param.decays``: matrices and embeddings), eps on the bias-corrected root as torch has it
  (Keras does not), and the bias corrections taken to float32's precision (``scale_by_adam``);
* --clip-grad-norm: ``optax.clip_by_global_norm`` first in the chain, on the global-batch
  gradient. Optax scales by ``C / norm`` where the rule has ``C / (norm + 1e-6)``: 1e-6 / norm
  apart, 2.5e-7 relative at the test's norms (tests/test_jax_model.py bounds it).

The learning rate is the run's, set each step (the harness's ``lr_at``, the one schedule every
backend follows): ``optax.inject_hyperparams`` keeps it in the optimizer state, where the step
writes it (``with_learning_rate``), so a new rate per step does not recompile.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import optax

from parbench.contract.optim import OptimizerSpec
from parbench.contract.spec import ModelSpec, parameters

from . import model

LEARNING_RATE = "learning_rate"


def make_optimizer(spec: ModelSpec, rule: OptimizerSpec) -> optax.GradientTransformation:
    """The run's optimizer (--optimizer, --clip-grad-norm) for ``spec``'s parameters."""
    if rule.name not in ("sgd", "adamw"):
        raise ValueError(f"JAX has no optimizer {rule.name!r}")
    clip = [] if rule.clip_grad_norm is None else [optax.clip_by_global_norm(rule.clip_grad_norm)]

    def chain(learning_rate: jax.Array) -> optax.GradientTransformation:
        if rule.name == "sgd":
            update = optax.chain(optax.add_decayed_weights(rule.weight_decay),
                                 optax.sgd(learning_rate, momentum=rule.momentum))
        else:
            # optax.adamw, with its Adam scaling replaced (scale_by_adam's note says why)
            update = optax.chain(scale_by_adam(rule.beta1, rule.beta2, rule.eps),
                                 optax.add_decayed_weights(rule.weight_decay, decay_mask(spec)),
                                 optax.scale_by_learning_rate(learning_rate))
        return optax.chain(*clip, update)

    # a Python float: inject_hyperparams keeps a number as a traced hyperparameter (a numpy
    # scalar such as np.float32 it would take as a static argument of ``chain``)
    return optax.inject_hyperparams(chain)(learning_rate=rule.lr)


def scale_by_adam(b1: float, b2: float, eps: float) -> optax.GradientTransformation:
    """``optax.scale_by_adam`` with the bias corrections ``1 - beta**t`` taken to float32's
    precision. Optax takes them as ``1 - float32(beta)**t``, and float32 holds 0.999 as
    0.99900001, so ``1 - beta2`` is already 1.3e-5 off before any power (torch and the numpy
    rule take them in float64): ``optax.adamw`` ends 8.5e-6 from the rule after 10 steps,
    against the tests' 1e-6. ``-expm1(t * log(beta))``, with ``log(beta)`` in double
    precision, is accurate to rounding for every t. The moments are optax's own."""
    def init(params) -> optax.ScaleByAdamState:
        # two trees of zeros, not one tree twice: a step that donates its state would be
        # handed the same buffer for both (XLA refuses: "donate the same buffer twice")
        mu, nu = (jax.tree.map(jnp.zeros_like, params) for _ in range(2))
        return optax.ScaleByAdamState(count=jnp.zeros((), jnp.int32), mu=mu, nu=nu)

    def update(grads, state: optax.ScaleByAdamState, params=None):
        mu = optax.tree.update_moment(grads, state.mu, b1, 1)
        nu = optax.tree.update_moment_per_elem_norm(grads, state.nu, b2, 2)
        count = optax.safe_increment(state.count)
        t = count.astype(jnp.float32)
        correction1 = -jnp.expm1(t * jnp.float32(math.log(b1)))
        root_correction2 = jnp.sqrt(-jnp.expm1(t * jnp.float32(math.log(b2))))
        scaled = jax.tree.map(lambda m, v: m / correction1 / (jnp.sqrt(v) / root_correction2
                                                               + eps), mu, nu)
        return scaled, optax.ScaleByAdamState(count=count, mu=mu, nu=nu)

    return optax.GradientTransformation(init, update)


def decay_mask(spec: ModelSpec):
    """params -> whether AdamW's decoupled decay applies to each array (by canonical name)."""
    decays = {name: param.decays for name, param in parameters(spec).items()}

    def mask(params):
        return jax.tree.unflatten(jax.tree.structure(params),
                                  [decays[name] for name in model.names(params)])

    return mask


def with_learning_rate(opt_state: optax.OptState, lr: jax.Array) -> optax.OptState:
    """``opt_state`` with this step's learning rate (inject_hyperparams' state)."""
    return opt_state._replace(hyperparams={**opt_state.hyperparams, LEARNING_RATE: lr})


def clipped(grads, max_norm: float) -> jax.Array:
    """Whether --clip-grad-norm shrinks ``grads`` (a finite norm above C only: an overflowed
    step is not a clipped one), for Observed.clipped_steps."""
    norm = optax.global_norm(grads)
    return jnp.logical_and(norm > max_norm, jnp.isfinite(norm))
