"""Model specifications as data: every framework builds its model from these, nothing else.

Conventions every builder must follow (and the parity tests check):

* Images are NCHW float32 in the shared data; a builder that wants NHWC transposes itself.
* Convolutions are 3x3 with padding 1 on *every* side, or 1x1 with padding 0. TF's
  ``padding="same"`` pads stride-2 convolutions asymmetrically, so it is not this spec.
* A convolution has a bias exactly when no BatchNorm follows it.
* Residual block: ``relu(norm2(conv2(relu(norm1(conv1(x))))) + shortcut(x))``; the shortcut is
  a 1x1 convolution (+ norm) when the stride or the channel count changes, else identity.
* Head: global average pool over H and W, then a dense layer with bias.
* BatchNorm uses the torch convention: ``running = (1 - momentum) * running + momentum * batch``
  (Keras and Paddle call ``1 - momentum`` their momentum), normalises with the biased batch
  variance and updates ``running_var`` with the unbiased one.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class BatchNormSpec:
    momentum: float = 0.1
    eps: float = 1e-5


@dataclass(frozen=True)
class ResNetSpec:
    input_shape: tuple[int, int, int]  # (channels, height, width)
    num_classes: int
    stem_channels: int = 8
    stage_channels: tuple[int, ...] = (8, 16, 32)
    stage_strides: tuple[int, ...] = (1, 2, 2)
    norm: BatchNormSpec | None = field(default_factory=BatchNormSpec)
    kind: str = "resnet"


@dataclass(frozen=True)
class MLPSpec:
    input_shape: tuple[int, int, int]
    num_classes: int
    hidden: tuple[int, ...] = (128, 64)
    kind: str = "mlp"


ModelSpec = ResNetSpec | MLPSpec

MODEL_NAMES = ("resnet", "resnet-nonorm", "mlp")


def build_spec(model: str, input_shape: tuple[int, int, int], num_classes: int) -> ModelSpec:
    """The spec of a named model for a dataset's input shape and class count."""
    if model == "resnet":
        return ResNetSpec(input_shape, num_classes)
    if model == "resnet-nonorm":
        return ResNetSpec(input_shape, num_classes, norm=None)
    if model == "mlp":
        return MLPSpec(input_shape, num_classes)
    raise ValueError(f"unknown model {model!r}; choose one of {', '.join(MODEL_NAMES)}")


@dataclass(frozen=True)
class Param:
    """One tensor of the canonical weights: conv kernels OIHW, dense kernels [out, in]."""

    shape: tuple[int, ...]
    role: str  # conv | conv_bias | dense | dense_bias | bn_gamma | bn_beta | bn_mean | bn_var

    @property
    def trainable(self) -> bool:
        return self.role not in ("bn_mean", "bn_var")


def _conv(params: dict, prefix: str, c_in: int, c_out: int, k: int, norm: bool) -> None:
    params[f"{prefix}.conv.weight"] = Param((c_out, c_in, k, k), "conv")
    if norm:
        for suffix, role in (("weight", "bn_gamma"), ("bias", "bn_beta"),
                             ("running_mean", "bn_mean"), ("running_var", "bn_var")):
            params[f"{prefix}.bn.{suffix}"] = Param((c_out,), role)
    else:
        params[f"{prefix}.conv.bias"] = Param((c_out,), "conv_bias")


def _dense(params: dict, prefix: str, n_in: int, n_out: int) -> None:
    params[f"{prefix}.weight"] = Param((n_out, n_in), "dense")
    params[f"{prefix}.bias"] = Param((n_out,), "dense_bias")


def resnet_blocks(spec: ResNetSpec) -> list[tuple[str, int, int, int, bool]]:
    """(name, c_in, c_out, stride, has_projection) of every residual block, in order."""
    blocks, c_in = [], spec.stem_channels
    for i, (c_out, stride) in enumerate(zip(spec.stage_channels, spec.stage_strides)):
        blocks.append((f"blocks.{i}", c_in, c_out, stride, stride != 1 or c_in != c_out))
        c_in = c_out
    return blocks


def parameters(spec: ModelSpec) -> dict[str, Param]:
    """Every tensor of the model, by canonical name, in the order they are initialised."""
    params: dict[str, Param] = {}
    if isinstance(spec, MLPSpec):
        n_in = spec.input_shape[0] * spec.input_shape[1] * spec.input_shape[2]
        for i, width in enumerate(spec.hidden):
            _dense(params, f"hidden.{i}", n_in, width)
            n_in = width
        _dense(params, "head", n_in, spec.num_classes)
        return params
    norm = spec.norm is not None
    _conv(params, "stem", spec.input_shape[0], spec.stem_channels, 3, norm)
    for name, c_in, c_out, _stride, projection in resnet_blocks(spec):
        _conv(params, f"{name}.conv1", c_in, c_out, 3, norm)
        _conv(params, f"{name}.conv2", c_out, c_out, 3, norm)
        if projection:
            _conv(params, f"{name}.shortcut", c_in, c_out, 1, norm)
    _dense(params, "head", spec.stage_channels[-1], spec.num_classes)
    return params


def parameter_count(spec: ModelSpec) -> int:
    """Trainable scalars (BatchNorm running statistics excluded)."""
    total = 0
    for param in parameters(spec).values():
        if param.trainable:
            count = 1
            for dim in param.shape:
                count *= dim
            total += count
    return total


def spec_dict(spec: ModelSpec) -> dict:
    return asdict(spec)


def spec_from_dict(data: dict) -> ModelSpec:
    """Inverse of spec_dict (job files carry the spec as JSON)."""
    data = dict(data)
    data["input_shape"] = tuple(data["input_shape"])
    if data["kind"] == "mlp":
        data["hidden"] = tuple(data["hidden"])
        return MLPSpec(**data)
    data["stage_channels"] = tuple(data["stage_channels"])
    data["stage_strides"] = tuple(data["stage_strides"])
    if data["norm"] is not None:
        data["norm"] = BatchNormSpec(**data["norm"])
    return ResNetSpec(**data)


def sha256_of(obj) -> str:
    """Stable hash of JSON-able data (sorted keys)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()
