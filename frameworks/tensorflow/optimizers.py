"""The optimizers every TensorFlow strategy applies: parbench.contract.optim's rules (SGD, AdamW) as
Keras optimizers, with --clip-grad-norm taken on the global-batch gradient.

Keras' built-in SGD and AdamW each differ from the shared rules (see the classes), and its
``global_clipnorm`` clips each replica's part of the gradient before the replicas' parts are
summed (see GlobalNormClip), so all three are done here.
"""

from __future__ import annotations

from parbench.contract.optim import CLIP_EPS, OptimizerSpec
from parbench.contract.spec import ModelSpec, parameters

from .tfkeras import keras, tf


class GlobalNormClip(keras.optimizers.Optimizer):
    """--clip-grad-norm on the *global-batch* gradient, for the shared-rule optimizers below.

    Keras' own ``global_clipnorm`` clips in ``_backend_apply_gradients``, before
    ``_backend_update_step`` sums the replicas' gradients: under a strategy each replica clips
    its shard's contribution by that contribution's norm. Here the clip sits in the TF
    optimizer's summation hook, ``_all_reduce_sum_gradients``, the one point after the sum and
    before the per-replica update: the replica-context all-reduce runs first, then every
    replica takes the same norm of the same sum, clips it by torch's formula and counts the
    step, and the update applies it to its copy with no second reduction. Gradient
    accumulation (summed before ``apply``) and fp16 (``LossScaleOptimizer`` unscales before
    the inner ``apply``) reach it already combined and unscaled: one clip per optimizer step.
    Should a Keras release stop calling the hook, no step clips and ``clipped()`` stays None,
    which fails the run after its first step (parbench.modes.check_observed)."""

    def __init__(self, clip_norm: float | None, name: str, **kwargs):
        super().__init__(name=name, **kwargs)
        self.clip_norm = clip_norm
        self.clip_traced = False  # set when a traced step holds the clip: evidence for Observed

    def build(self, variables: list) -> None:
        if self.built:
            return
        super().build(variables)
        # one count, as Keras keeps ``iterations``: every replica adds the same 0 or 1
        self.clipped_steps = self.add_variable((), initializer="zeros", dtype="int64",
                                               aggregation="only_first_replica",
                                               name="clipped_steps")

    def _all_reduce_sum_gradients(self, grads_and_vars):
        summed = super()._all_reduce_sum_gradients(grads_and_vars)  # the global-batch gradient
        if self.clip_norm is None:
            return summed
        self.clip_traced = True
        # torch's clip_grad_norm_: the norm of the tensors' norms, min(1, C / (norm + 1e-6))
        norm = tf.norm(tf.stack([tf.norm(g) for g, _ in summed]))
        scale = tf.minimum(1.0, self.clip_norm / (norm + CLIP_EPS))
        exceeded = tf.logical_and(tf.math.is_finite(norm), norm > self.clip_norm)
        self.clipped_steps.assign_add(tf.cast(exceeded, tf.int64))
        return [(g * tf.cast(scale, g.dtype), v) for g, v in summed]

    def clipped(self) -> int | None:
        """Steps so far whose global-batch gradient norm exceeded the limit; None when no
        traced step clips."""
        return int(self.clipped_steps.numpy()) if self.clip_traced else None


class SharedSGD(GlobalNormClip):
    """parbench.contract.optim's rule (torch SGD): ``buf = m * buf + (g + wd * p); p -= lr * buf``.
    Keras' SGD keeps ``v = m * v - lr * g`` instead, which differs once lr changes, and its
    weight decay is decoupled. Under a strategy, Keras' optimizer base sums the replicas'
    gradients and applies this update on every replica's copy."""

    def __init__(self, momentum: float, weight_decay: float, learning_rate=0.0,
                 clip_norm: float | None = None):
        super().__init__(clip_norm, learning_rate=learning_rate, name="shared_sgd")
        self.momentum, self.coupled_weight_decay = momentum, weight_decay

    def build(self, variables: list) -> None:
        if self.built:
            return
        super().build(variables)
        self.buffers = self.add_optimizer_variables(variables, "momentum_buffer")

    def update_step(self, gradient: tf.Tensor, variable, learning_rate) -> None:
        buf = self.buffers[self._get_variable_index(variable)]
        lr = tf.cast(learning_rate, variable.dtype)
        gradient = gradient + self.coupled_weight_decay * variable
        self.assign(buf, self.momentum * buf + gradient)
        self.assign_sub(variable, lr * buf)


class SharedAdamW(GlobalNormClip):
    """parbench.contract.optim's adamw rule (torch AdamW): eps added to the bias-corrected root,
    ``p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)``. Keras' AdamW computes
    ``p -= lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps)``: eps on the uncorrected
    root, an effective eps of ``eps * sqrt(1 - b2^t)``. The decoupled decay
    ``p -= p * wd * lr`` before the update is Keras' own (the optimizer base's
    ``_apply_weight_decay``), restricted to the decaying tensors by its
    ``exclude_from_weight_decay`` (see ``_adamw``)."""

    def __init__(self, spec: OptimizerSpec, learning_rate=0.0):
        super().__init__(spec.clip_grad_norm, learning_rate=learning_rate,
                         weight_decay=spec.weight_decay, name="shared_adamw")
        self.beta1, self.beta2, self.eps = spec.beta1, spec.beta2, spec.eps

    def build(self, variables: list) -> None:
        if self.built:
            return
        super().build(variables)
        self.m = self.add_optimizer_variables(variables, "m")
        self.v = self.add_optimizer_variables(variables, "v")

    def update_step(self, gradient: tf.Tensor, variable, learning_rate) -> None:
        index = self._get_variable_index(variable)
        m, v = self.m[index], self.v[index]
        lr = tf.cast(learning_rate, variable.dtype)
        # The corrections in float64, as torch takes them in Python floats: in float32,
        # 1 - 0.999 is already 1.3e-5 off (Keras' Adam computes them in float32)
        t = tf.cast(self.iterations + 1, tf.float64)  # counted from 1
        correction1 = tf.cast(1 - self.beta1 ** t, variable.dtype)
        root_correction2 = tf.cast(tf.sqrt(1 - self.beta2 ** t), variable.dtype)
        self.assign(m, self.beta1 * m + (1 - self.beta1) * gradient)
        self.assign(v, self.beta2 * v + (1 - self.beta2) * tf.square(gradient))
        denominator = tf.sqrt(v) / root_correction2 + self.eps
        self.assign_sub(variable, lr / correction1 * m / denominator)


def _sgd(model: keras.Model, spec: ModelSpec, rule: OptimizerSpec,
         learning_rate) -> GlobalNormClip:
    return SharedSGD(rule.momentum, rule.weight_decay, learning_rate, rule.clip_grad_norm)


def _adamw(model: keras.Model, spec: ModelSpec, rule: OptimizerSpec,
           learning_rate) -> GlobalNormClip:
    optimizer = SharedAdamW(rule, learning_rate)
    # the decay mask: Keras' own exclusion list (before build), from each tensor's role
    roles = parameters(spec)
    optimizer.exclude_from_weight_decay(var_list=[
        variable for name, variable in model.canonical_variables().items()
        if roles[name].trainable and not roles[name].decays])
    return optimizer


OPTIMIZERS = {"sgd": _sgd, "adamw": _adamw}  # parbench.optim.OPTIMIZERS, each by its rule


def make_optimizer(model: keras.Model, spec: ModelSpec, rule: OptimizerSpec,
                   precision: str = "fp32", learning_rate=None) -> keras.optimizers.Optimizer:
    """The shared rule (--optimizer) with --clip-grad-norm, its variables created now: call
    inside the strategy's scope, so they are mirrored like the weights (a first build inside
    a compiled step would be in replica context, where variables cannot be created).
    ``learning_rate``: a schedule for fit; the custom loops assign each step's rate instead.
    fp16: wrapped in Keras' dynamic loss scaling (``scale_loss`` before the gradient, ``apply``
    unscales, skips a step whose gradients are not finite and halves the scale); bf16 has
    float32's range and needs none."""
    if rule.name not in OPTIMIZERS:
        raise ValueError(f"TensorFlow has no optimizer {rule.name!r}")
    shared = OPTIMIZERS[rule.name](model, spec, rule,
                                   rule.lr if learning_rate is None else learning_rate)
    wrapped = keras.optimizers.LossScaleOptimizer(shared) if precision == "fp16" else shared
    wrapped.build(model.trainable_variables)
    return wrapped

