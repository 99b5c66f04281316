"""The shared optimizers (parbench.contract.optim) and --clip-grad-norm in Paddle.

``sgd`` is ``paddle.optimizer.Momentum`` with a float weight decay, ``adamw`` is
``paddle.optimizer.AdamW``: both are the shared rules' math; AdamW's kernel holds the betas in
float32, which tests/test_vit_paddle.py measures against parbench.optim.AdamWReference.

Clipping is done here, not by ``paddle.nn.ClipGradByGlobalNorm``: that multiplies by
``C / max(norm, C)``, without the rule's ``+ 1e-6``, and keeps its norm to itself, while the
record needs the count of steps that clipped. Both see the same gradients: under
``paddle.DataParallel`` they are already averaged over the processes when backward returns,
so the norm is the global batch's.
"""

from __future__ import annotations

import paddle
from paddle import nn

from parbench.contract.optim import CLIP_EPS, OptimizerSpec
from parbench.contract.spec import ModelSpec

from .model import decaying_parameters


def trainable(model: nn.Layer) -> list[paddle.Tensor]:
    """The parameters the optimizer updates: BatchNorm's running statistics are parameters in
    Paddle too, but not trainable ones, so they are left out."""
    return [p for p in model.parameters() if p.trainable]


def sgd(model: nn.Layer, spec: OptimizerSpec) -> paddle.optimizer.Momentum:
    """Paddle's Momentum with a float weight decay is the shared rule exactly (L2 decay fused
    into the kernel: ``g + wd*p``, ``buf = m*buf + g``, ``p -= lr*buf``), every tensor decays."""
    return paddle.optimizer.Momentum(learning_rate=spec.lr, momentum=spec.momentum,
                                     parameters=trainable(model),
                                     weight_decay=spec.weight_decay)


def adamw(model: nn.Layer, spec: OptimizerSpec, model_spec: ModelSpec) -> paddle.optimizer.AdamW:
    """Paddle's AdamW is the rule: its CPU kernel (``AdamwDenseKernel``, jit ``AdamW``)
    decays ``p - lr * coeff * p`` with the lr fed (lr_ratio 1), then takes the Adam step with
    ``lr * sqrt(1 - beta2^t) / (1 - beta1^t)`` and ``eps * sqrt(1 - beta2^t)``, which is
    the rule's eps on the bias-corrected root rearranged. (Its docstring's formula puts eps on
    the uncorrected root: the kernel does not.) It holds beta1, beta2 and their powers in
    float32, so 1 - beta2 is 9.99987e-4 for 0.999: 2.8e-6 from the rule after 5 steps, 9.3e-6
    from torch after the 10-step vit trajectory (measured), far inside the tolerance, and the
    fused kernel is kept. Decay follows ``Param.decays`` through ``apply_decay_param_fun``,
    which Paddle calls with each parameter's unique name."""
    decays = decaying_parameters(model, model_spec)
    return paddle.optimizer.AdamW(learning_rate=spec.lr, beta1=spec.beta1, beta2=spec.beta2,
                                  epsilon=spec.eps, parameters=trainable(model),
                                  weight_decay=spec.weight_decay,
                                  apply_decay_param_fun=decays.__contains__)


def make_optimizer(model: nn.Layer, spec: OptimizerSpec,
                   model_spec: ModelSpec) -> paddle.optimizer.Optimizer:
    if spec.name == "sgd":
        return sgd(model, spec)
    if spec.name == "adamw":
        return adamw(model, spec, model_spec)
    raise ValueError(f"paddle has no optimizer {spec.name!r}")


def clipper(model: nn.Layer, spec: OptimizerSpec) -> GlobalNormClip | None:
    """--clip-grad-norm's clipping of the model's gradients, None without it."""
    if spec.clip_grad_norm is None:
        return None
    return GlobalNormClip(trainable(model), spec.clip_grad_norm)


class GlobalNormClip:
    """Multiplies the gradients by ``min(1, C / (norm + 1e-6))``, norm over every trainable
    gradient (the rule in parbench.contract.optim, torch's clip_grad_norm_), and counts the steps whose
    norm exceeded C. All of it stays on the device: no host sync per step."""

    def __init__(self, parameters: list[paddle.Tensor], max_norm: float):
        self.parameters, self.max_norm = parameters, max_norm
        self._clipped = paddle.zeros([], "int64")

    @paddle.no_grad()
    def __call__(self) -> paddle.Tensor:
        """Clip the gradients in place (after any unscaling); returns the norm."""
        grads = [p.grad for p in self.parameters if p.grad is not None]
        norm = paddle.sqrt(paddle.add_n([paddle.sum(paddle.square(g)) for g in grads]))
        coefficient = paddle.clip(self.max_norm / (norm + CLIP_EPS), max=1.0)
        for grad in grads:
            grad.multiply_(coefficient)
        # an fp16 step with an inf/nan norm is skipped by the GradScaler: it does not count
        self._clipped += paddle.logical_and(norm > self.max_norm,
                                            paddle.isfinite(norm)).astype("int64")
        return norm

    @property
    def clipped_steps(self) -> int:
        return int(self._clipped)
