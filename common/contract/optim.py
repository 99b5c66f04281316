"""The optimizers every backend reproduces, gradient clipping, and the learning-rate schedule
fed to them per step.

``sgd`` (torch.optim.SGD with dampening 0, nesterov off), for every trainable tensor,
BatchNorm scales and all biases included (the rule the verified records were made with)::

    g   = grad + weight_decay * p
    buf = momentum * buf + g          (buf starts at 0, so the first buf is g)
    p   = p - lr * buf

Keras' SGD keeps ``v = momentum * v - lr * g`` instead: the same only while lr is constant, so
the TensorFlow backends apply this rule themselves. Paddle's ``Momentum`` with an L2 decay
coefficient is this rule.

``adamw`` (torch.optim.AdamW, amsgrad off), step t counted from 1::

    p   = p - lr * weight_decay * p   only for tensors whose role decays (parbench.contract.spec:
                                      matrices and embeddings; never norms and biases)
    m   = beta1 * m + (1 - beta1) * grad
    v   = beta2 * v + (1 - beta2) * grad**2
    p   = p - (lr / (1 - beta1**t)) * m / (sqrt(v) / sqrt(1 - beta2**t) + eps)

eps is added to the *bias-corrected* root (Keras adds it to the uncorrected one); the decay is
decoupled (multiplies p, never enters m or v) and scaled by lr. ``AdamWReference`` is this rule
in numpy, what each framework's optimizer is tested against.

Clipping (``--clip-grad-norm C``, either optimizer): the gradients are multiplied by
``min(1, C / (norm + 1e-6))`` where ``norm`` is the L2 norm over every trainable tensor of the
*global-batch* gradient, the one after the devices' gradients are combined, so N devices clip
exactly as one device does (torch's ``clip_grad_norm_`` formula).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from parbench.base.options import NON_NEGATIVE, POSITIVE, UNIT_INTERVAL, Option

SCHEDULES = ("cosine", "constant")
OPTIMIZERS = ("sgd", "adamw")
LR_RULES = ("none", "linear")
CLIP_EPS = 1e-6  # torch's clip_grad_norm_ adds it to the norm
REFERENCE_BATCH = 128  # the linear scaling rule scales lr by global_batch / REFERENCE_BATCH


@dataclass(frozen=True)
class OptimizerSpec:
    lr: float = 0.1
    momentum: float = 0.9  # sgd only
    weight_decay: float = 5e-4
    schedule: str = "cosine"
    warmup_steps: int = 0
    name: str = "sgd"  # sgd | adamw
    beta1: float = 0.9  # adamw only
    beta2: float = 0.999
    eps: float = 1e-8
    clip_grad_norm: float | None = None  # None: no clipping

    def as_dict(self) -> dict:
        """The fields a record and a spec hash carry: the AdamW and clipping fields only where
        they are used, so an SGD run keeps the hash (and the record name) it always had."""
        data = asdict(self)
        unused = ("name", "beta1", "beta2", "eps") if self.name == "sgd" else ("momentum",)
        for key in unused:
            data.pop(key)
        if self.clip_grad_norm is None:
            data.pop("clip_grad_norm")
        return data


def clip_coefficient(norm: float, max_norm: float) -> float:
    """What --clip-grad-norm multiplies the global-batch gradient by."""
    return min(1.0, max_norm / (norm + CLIP_EPS))


class AdamWReference:
    """The adamw rule above in numpy, float32 like the frameworks, for the optimizer tests."""

    def __init__(self, spec: OptimizerSpec, decays: dict[str, bool]):
        self.spec, self.decays, self.t = spec, decays, 0
        self.m: dict[str, np.ndarray] = {}
        self.v: dict[str, np.ndarray] = {}

    def step(self, params: dict[str, np.ndarray], grads: dict[str, np.ndarray],
             lr: float) -> None:
        spec, f32 = self.spec, np.float32
        self.t += 1
        correction1 = f32(1 - spec.beta1 ** self.t)
        root_correction2 = f32(math.sqrt(1 - spec.beta2 ** self.t))
        for name, grad in grads.items():
            p = params[name]
            if self.decays[name]:
                p *= f32(1 - lr * spec.weight_decay)
            m = self.m.setdefault(name, np.zeros_like(p))
            v = self.v.setdefault(name, np.zeros_like(p))
            m *= f32(spec.beta1)
            m += f32(1 - spec.beta1) * grad
            v *= f32(spec.beta2)
            v += f32(1 - spec.beta2) * grad * grad
            p -= f32(lr) / correction1 * m / (np.sqrt(v) / root_correction2 + f32(spec.eps))


def lr_at(step: int, total_steps: int, spec: OptimizerSpec) -> float:
    """Learning rate of global step ``step`` (0-based) out of ``total_steps``."""
    if step < spec.warmup_steps:
        return spec.lr * (step + 1) / spec.warmup_steps
    if spec.schedule == "constant":
        return spec.lr
    progress = (step - spec.warmup_steps) / max(1, total_steps - spec.warmup_steps)
    return spec.lr * 0.5 * (1.0 + math.cos(math.pi * progress))


# The optimizer's options (parbench.base.options). Not given, an optimizer's setting takes its
# default (parbench.launch.config.OPTIMIZER_DEFAULTS); one of the other optimizer is an error.
OPTIMIZER_OPTIONS = (
    Option("optimizer", str, help="sgd (momentum, L2 decay on every tensor; the image models' "
           "default) or adamw (decoupled decay on matrices and embeddings only; gpt's "
           "default); the rules are in parbench.contract.optim", owner="optimizer",
           choices=OPTIMIZERS),
    Option("lr", float, help="base learning rate (sgd 0.1, adamw 0.001; gpt without a budget of "
           "your own 0.01, its recipe)", owner="optimizer", bounds=POSITIVE),
    Option("lr_scaling", str, "none", "none (default) or linear: lr x global_batch / 128",
           owner="optimizer", choices=LR_RULES),
    Option("momentum", float, help="sgd (0.9)", owner="optimizer", bounds=UNIT_INTERVAL),
    Option("weight_decay", float, help="sgd 5e-4, adamw 0.05", owner="optimizer",
           bounds=NON_NEGATIVE),
    Option("beta1", float, help="adamw (0.9)", owner="optimizer", bounds=UNIT_INTERVAL),
    Option("beta2", float, help="adamw (0.999)", owner="optimizer", bounds=UNIT_INTERVAL),
    Option("eps", float, help="adamw (1e-8), added to the bias-corrected root",
           owner="optimizer", bounds=POSITIVE),
    Option("clip_grad_norm", float, help="scale the global-batch gradient to norm C when its "
           "norm exceeds C (after the devices' gradients are combined); the record counts the "
           "steps that clipped", owner="optimizer", bounds=POSITIVE, metavar="C"),
    Option("schedule", str, "cosine", "cosine (default) or constant", owner="optimizer",
           choices=SCHEDULES),
    Option("warmup_steps", int, 0, "steps of linear warm-up (0; gpt without a budget of your "
           "own 32, its recipe)", owner="optimizer", bounds=NON_NEGATIVE),
)


def scaled_lr(base_lr: float, global_batch: int, rule: str) -> float:
    """The base lr after the batch-size rule (``none`` or ``linear``)."""
    return base_lr * global_batch / REFERENCE_BATCH if rule == "linear" else base_lr
