"""Builds the spec's model as a paddle.nn.Layer and moves canonical weights in and out.

Layer names are chosen to equal the canonical names (the vision transformer is in vit.py, the
language model in gpt.py, the detector in centernet.py, the layers the ResNet shares with it in
layers.py); three things differ from the canonical layout and are mapped here:
``nn.Linear`` stores its weight [in, out] (canonical [out, in]; the GPT's embeddings are plain
parameters, [vocab, width] and [context, width] in both layouts, so they are not transposed),
BatchNorm calls its running statistics ``_mean`` / ``_variance``, and Paddle's BatchNorm
follows a different convention than the spec (see ``layers.BatchNorm``).
"""

from __future__ import annotations

import numpy as np
import paddle
import paddle.nn.functional as F
from paddle import nn

from parbench.contract.spec import (
    CenterNetSpec,
    MLPSpec,
    ModelSpec,
    ResNetSpec,
    kind_of,
    parameters,
)

from .centernet import CenterNet
from .gpt import GPT
from .layers import BatchNorm, ConvNorm, SyncBatchNorm, stem_and_blocks
from .vit import ViT

# Paddle's name of a BatchNorm running statistic -> the canonical name
_STAT_NAMES = {"_mean": "running_mean", "_variance": "running_var"}


class ResNet(nn.Layer):
    def __init__(self, spec: ResNetSpec):
        super().__init__()
        self.stem, self.blocks = stem_and_blocks(spec)
        self.head = nn.Linear(spec.stage_channels[-1], spec.num_classes)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        x = self.blocks(self.stem(x))
        return self.head(x.mean(axis=[2, 3]))


class MLP(nn.Layer):
    def __init__(self, spec: MLPSpec):
        super().__init__()
        widths = [int(np.prod(spec.input_shape)), *spec.hidden]
        self.hidden = nn.LayerList([nn.Linear(a, b) for a, b in zip(widths, widths[1:])])
        self.head = nn.Linear(widths[-1], spec.num_classes)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        x = x.flatten(1)
        for layer in self.hidden:
            x = F.relu(layer(x))
        return self.head(x)


# spec.kind -> the Layer that builds it
BUILDERS: dict[str, type[nn.Layer]] = {"resnet": ResNet, "mlp": MLP, "vit": ViT, "gpt": GPT,
                                       "centernet": CenterNet}


def first_layer(model: nn.Layer) -> nn.Layer:
    """The layer whose output dtype shows the precision the model computes in: the stem
    convolution of the resnet and the detector, the first Linear of the MLP, the vit's patch
    convolution (each model registers it first), the GPT's first qkv projection (its
    embeddings are parameters, not layers, and a lookup is not autocast: it returns its
    table's dtype)."""
    return next(layer for layer in model.sublayers() if isinstance(layer, (nn.Conv2D, nn.Linear)))


def has_batchnorm(model: nn.Layer) -> bool:
    return any(isinstance(layer, (BatchNorm, SyncBatchNorm)) for layer in model.sublayers())


def convert_sync_batchnorm(model: nn.Layer, replicas: int) -> int:
    """Replace every BatchNorm by a SyncBatchNorm over ``replicas`` processes, in place (before
    the optimizer and DataParallel see the parameters); returns how many were replaced.

    Not ``nn.SyncBatchNorm.convert_sync_batchnorm``: it would build plain SyncBatchNorm layers,
    which update the running variance in Paddle's convention instead of the spec's.
    """
    holders = [layer for layer in model.sublayers()
               if isinstance(layer, ConvNorm) and isinstance(layer.bn, BatchNorm)]
    for holder in holders:
        holder.bn = SyncBatchNorm(holder.bn, replicas)
    return len(holders)


def model_notes(spec: ModelSpec) -> list[str]:
    """What a record should say about how this model runs in Paddle (it costs time)."""
    if isinstance(spec, ResNetSpec | CenterNetSpec) and spec.norm is not None:
        return ["BatchNorm: running_var re-derived with the unbiased batch variance after "
                "Paddle's kernel (one extra reduction per BatchNorm layer and step)"]
    return []


def _canonical_name(name: str) -> str:
    prefix, dot, last = name.rpartition(".")  # no dot: a top-level tensor (class_token)
    return f"{prefix}{dot}{_STAT_NAMES.get(last, last)}"


def decaying_parameters(model: nn.Layer, spec: ModelSpec) -> set[str]:
    """Paddle's unique names (``linear_3.w_0``: what AdamW's apply_decay_param_fun is given)
    of the parameters whose canonical tensor decays (parbench.spec.Param.decays)."""
    canonical = parameters(spec)
    return {param.name for name, param in model.named_parameters()
            if canonical[_canonical_name(name)].decays}


def _linear_weights(model: nn.Layer) -> set[str]:
    """Paddle names of the [in, out] kernels, which the canonical layout stores transposed."""
    return {f"{name}.weight" for name, layer in model.named_sublayers()
            if isinstance(layer, nn.Linear)}


def build_model(spec: ModelSpec, weights: dict[str, np.ndarray]) -> nn.Layer:
    """The spec's model holding the canonical ``weights``."""
    kind_of(spec)  # an unknown kind is a ValueError, never another model
    if spec.kind not in BUILDERS:
        raise ValueError(f"paddle has no builder for model kind {spec.kind!r}")
    model = BUILDERS[spec.kind](spec)
    names = {_canonical_name(name) for name in model.state_dict()}
    if names != set(weights):
        raise ValueError(f"canonical weights do not fit the paddle model: missing "
                         f"{sorted(names - set(weights))}, unexpected "
                         f"{sorted(set(weights) - names)}")
    model.set_state_dict(paddle_state(model, weights))
    return model


def paddle_state(model: nn.Layer, arrays: dict[str, np.ndarray]) -> dict[str, paddle.Tensor]:
    """Canonical name -> array, as the Layer's structured name -> tensor in Paddle's layout:
    its weights, or any part of them (an optimizer's slots of its trainable tensors)."""
    linear, current = _linear_weights(model), model.state_dict()
    structured = {_canonical_name(name): name for name in current}
    state = {}
    for canonical, array in arrays.items():
        name = structured[canonical]
        array = np.asarray(array, np.float32)
        array = array.T.copy() if name in linear else array
        if tuple(array.shape) != tuple(current[name].shape):
            # set_state_dict only warns about a shape mismatch and keeps the old tensor
            raise ValueError(f"{canonical}: shape {array.shape} does not fit the paddle model "
                             f"({name}: {tuple(current[name].shape)})")
        state[name] = paddle.to_tensor(array)
    return state


def canonical(model: nn.Layer, tensors) -> dict[str, np.ndarray]:
    """(Paddle name, tensor) pairs as canonical name -> array in the canonical layout."""
    linear = _linear_weights(model)
    return {_canonical_name(name): (tensor.numpy().T if name in linear else tensor.numpy()).copy()
            for name, tensor in tensors}


def export_weights(model: nn.Layer) -> dict[str, np.ndarray]:
    return canonical(model, model.state_dict().items())


def export_gradients(model: nn.Layer) -> dict[str, np.ndarray]:
    """The trainable parameters' gradients in the canonical layout (what the optimizer tests
    feed parbench.optim.AdamWReference)."""
    return canonical(model, ((name, p.grad) for name, p in model.named_parameters()
                              if p.grad is not None))
