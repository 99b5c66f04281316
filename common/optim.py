"""The optimizer every backend reproduces, and the learning-rate schedule fed to it per step.

Update rule (torch.optim.SGD with dampening 0, nesterov off), for every trainable tensor,
BatchNorm scales and all biases included::

    g   = grad + weight_decay * p
    buf = momentum * buf + g          (buf starts at 0, so the first buf is g)
    p   = p - lr * buf

Keras' SGD keeps ``v = momentum * v - lr * g`` instead: the same only while lr is constant, so
the TensorFlow backends apply this rule themselves. Paddle's ``Momentum`` with an L2 decay
coefficient is this rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SCHEDULES = ("cosine", "constant")
REFERENCE_BATCH = 128  # the linear scaling rule scales lr by global_batch / REFERENCE_BATCH


@dataclass(frozen=True)
class OptimizerSpec:
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 5e-4
    schedule: str = "cosine"
    warmup_steps: int = 0


def lr_at(step: int, total_steps: int, spec: OptimizerSpec) -> float:
    """Learning rate of global step ``step`` (0-based) out of ``total_steps``."""
    if step < spec.warmup_steps:
        return spec.lr * (step + 1) / spec.warmup_steps
    if spec.schedule == "constant":
        return spec.lr
    progress = (step - spec.warmup_steps) / max(1, total_steps - spec.warmup_steps)
    return spec.lr * 0.5 * (1.0 + math.cos(math.pi * progress))


def scaled_lr(base_lr: float, global_batch: int, rule: str) -> float:
    """The base lr after the batch-size rule (``none`` or ``linear``)."""
    return base_lr * global_batch / REFERENCE_BATCH if rule == "linear" else base_lr
