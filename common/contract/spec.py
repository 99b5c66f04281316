"""Model specifications as data: every framework builds its model from these, nothing else.

Conventions every builder must follow (and the parity tests check):

* Images are NCHW float32 in the shared data; a builder that wants NHWC transposes itself.
* A k x k convolution pads k // 2 zeros on *every* side (3x3: 1, 1x1: 0, the 7x7 stem: 3).
  TF's ``padding="same"`` pads stride-2 convolutions asymmetrically, so it is not this spec.
* A convolution has a bias exactly when no BatchNorm follows it.
* Stem: ``relu(norm(conv(x)))``, a ``stem_kernel`` convolution at ``stem_stride``; with
  ``stem_pool`` then a 3x3 max-pool at stride 2 with padding 1 (torch's ``MaxPool2d(3, 2, 1)``:
  its input is a ReLU's, never negative, so padding with 0 or with -inf pools the same).
* Residual block: ``relu(norm2(conv2(relu(norm1(conv1(x))))) + shortcut(x))``; the shortcut is
  a 1x1 convolution (+ norm) when the stride or the channel count changes, else identity.
  Stage i has ``stage_blocks[i]`` blocks, the first at the stage's stride, the rest at 1.
* Bottleneck block (``bottleneck``; ResNet-50 v1.5, torchvision's): ``conv1`` 1x1 to
  ``c_out / 4`` channels, ``conv2`` 3x3 at the block's stride (v1.5: the stride is here, not in
  conv1), ``conv3`` 1x1 to ``c_out``, each with its norm and a ReLU between; the shortcut as
  above. Blocks are numbered through the stages: ``blocks.0`` to ``blocks.15`` in ResNet-50.
* Head: global average pool over H and W, then a dense layer with bias.
* BatchNorm uses the torch convention: ``running = (1 - momentum) * running + momentum * batch``
  (Keras and Paddle call ``1 - momentum`` their momentum), normalises with the biased batch
  variance and updates ``running_var`` with the unbiased one.

Vision transformer (``ViTSpec``), pre-norm:

* Patch embedding: a convolution with kernel = stride = ``patch``, no padding, with bias; its
  output (width, H/p, W/p) becomes H/p x W/p tokens in row-major order (token ``i * W/p + j``
  is patch row i, column j). The class token is prepended (token 0), then the learned position
  embedding (1 + tokens rows) is added.
* Block: ``x = x + proj(attention(norm1(x)))``, ``x = x + fc2(gelu(fc1(norm2(x))))``; GELU is
  the exact one (``0.5 x (1 + erf(x / sqrt 2))``, not the tanh approximation); dropout 0.
* Attention layout: one fused projection ``qkv`` with a [3 * width, width] kernel (canonical
  [out, in]) whose output rows are q, then k, then v, each ``heads`` consecutive blocks of
  ``width / heads`` rows (head h of q is rows [h*d, (h+1)*d)); per head
  ``softmax(q k^T / sqrt(d)) v``; the heads' outputs concatenated in head order feed ``proj``.
  This is torch's ``nn.MultiheadAttention`` ``in_proj_weight`` layout.
* LayerNorm over the width, biased variance, ``eps = norm_eps`` (1e-6: no framework's default,
  so each must set it); the final LayerNorm's class-token row feeds the dense head.

GPT-style causal language model (``GPTSpec``), decoder-only, pre-norm:

* Input: ``[rows, T]`` int64 token ids, ``T <= context``. ``x = token_embedding[ids] +
  position_embedding[:T]`` (both [rows, width] tables, looked up by index; no scaling).
* Blocks as the ViT's (same names, same fused qkv layout, exact GELU), except that attention is
  causal: position i attends to positions 0..i only (the masked scores are -inf before softmax).
* Final LayerNorm, then the output projection *tied* to the token embedding:
  ``logits = norm(x) @ token_embedding^T``, no bias: [rows, T, vocab]. One tensor, two uses,
  one gradient that sums both.
* LayerNorm ``eps = norm_eps`` = 1e-5 (torch's and Paddle's default, not Keras' 1e-3 nor
  Flax's 1e-6); no dropout.

CenterNet-style detector (``CenterNetSpec``; Zhou et al. 2019, "Objects as Points"):

* Backbone: the ResNet's stem and residual blocks (same names, conventions and BatchNorm),
  strided to ``stride`` (4), with no pooling and no dense head.
* Heads, in order ``heat`` (one map per class), ``size`` (width, height), ``offset`` (x, y):
  each ``out(relu(hidden(features)))``, ``hidden`` a 3x3 convolution to ``head_channels`` and
  ``out`` a 1x1 one to its maps, both with bias and no norm. The heat map's ``out`` bias
  starts at ``-log((1 - 0.1) / 0.1)``, a 0.1 prior per cell, as CenterNet's.
* Output: the heads' maps concatenated in that order, NCHW: [rows, classes + 4, H/4, W/4];
  the heat map is a logit (the loss and the decoding take its sigmoid).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from enum import Enum
from typing import NamedTuple

from parbench.base.options import Bounds, Option


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
    stem_kernel: int = 3
    stem_stride: int = 1
    stem_pool: bool = False
    stage_blocks: tuple[int, ...] = (1, 1, 1)  # residual blocks per stage
    bottleneck: bool = False
    kind: str = "resnet"

    def check(self) -> None:
        check_backbone(self)


@dataclass(frozen=True)
class MLPSpec:
    input_shape: tuple[int, int, int]
    num_classes: int
    hidden: tuple[int, ...] = (128, 64)
    kind: str = "mlp"


@dataclass(frozen=True)
class ViTSpec:
    input_shape: tuple[int, int, int]
    num_classes: int
    patch: int = 4  # divides 32 (synthetic, CIFAR-10), 28 (MNIST) and 8 (digits)
    width: int = 64
    depth: int = 2
    heads: int = 4
    mlp_width: int = 128
    norm_eps: float = 1e-6
    kind: str = "vit"

    @property
    def tokens(self) -> int:
        """Patches plus the class token."""
        _, height, width = self.input_shape
        return (height // self.patch) * (width // self.patch) + 1

    def check(self) -> None:
        _, height, width = self.input_shape
        if height % self.patch or width % self.patch:
            raise ValueError(f"vit: patch {self.patch} does not divide the {height}x{width} "
                             "images")
        if self.width % self.heads:
            raise ValueError(f"vit: {self.heads} heads do not divide the width {self.width}")


@dataclass(frozen=True)
class GPTSpec:
    vocab: int
    context: int  # the longest sequence: the position embedding's rows
    width: int = 64
    depth: int = 2
    heads: int = 4
    mlp_width: int = 256  # 4 x width, as GPT-2
    norm_eps: float = 1e-5
    kind: str = "gpt"

    @property
    def input_shape(self) -> tuple[int]:
        """One row's input: ``context`` token ids."""
        return (self.context,)

    def check(self) -> None:
        if self.width % self.heads:
            raise ValueError(f"gpt: {self.heads} heads do not divide the width {self.width}")


@dataclass(frozen=True)
class CenterNetSpec:
    """A CenterNet-style detector (see the module's conventions): a residual backbone as the
    ResNet's down to stride 4, then one head per output map."""

    input_shape: tuple[int, int, int]
    num_classes: int  # heat maps: one per class
    stem_channels: int = 16
    stage_channels: tuple[int, ...] = (16, 32, 32)
    stage_strides: tuple[int, ...] = (2, 2, 1)
    head_channels: int = 32
    norm: BatchNormSpec | None = field(default_factory=BatchNormSpec)
    stem_kernel: int = 3
    stem_stride: int = 1
    stem_pool: bool = False
    stage_blocks: tuple[int, ...] = (1, 1, 1)
    bottleneck: bool = False
    kind: str = "centernet"

    @property
    def stride(self) -> int:
        stride = self.stem_stride * (2 if self.stem_pool else 1)
        for step in self.stage_strides:
            stride *= step
        return stride

    @property
    def heads(self) -> tuple[tuple[str, int], ...]:
        """(name, output maps) of each head, in the order their maps are concatenated."""
        return ("heat", self.num_classes), ("size", 2), ("offset", 2)

    def check(self) -> None:
        check_backbone(self)
        _, height, width = self.input_shape
        if height % self.stride or width % self.stride:
            raise ValueError(f"centernet: stride {self.stride} does not divide the "
                             f"{height}x{width} images")


ModelSpec = ResNetSpec | MLPSpec | ViTSpec | GPTSpec | CenterNetSpec
Backbone = ResNetSpec | CenterNetSpec  # the specs with a stem and residual blocks


def check_backbone(spec: Backbone) -> None:
    stages = {len(spec.stage_channels), len(spec.stage_strides), len(spec.stage_blocks)}
    if len(stages) != 1:
        raise ValueError(f"{spec.kind}: stage_channels, stage_strides and stage_blocks must "
                         f"have one entry per stage; got {spec.stage_channels}, "
                         f"{spec.stage_strides}, {spec.stage_blocks}")
    if min(spec.stage_blocks) < 1:
        raise ValueError(f"{spec.kind}: every stage needs a block; got {spec.stage_blocks}")
    if spec.bottleneck and any(c % 4 for c in spec.stage_channels):
        raise ValueError(f"{spec.kind}: bottleneck blocks need stage channels divisible by 4 "
                         f"(their inner width is a quarter); got {spec.stage_channels}")


def resnet50(shape: tuple[int, int, int], classes: int) -> ResNetSpec:
    """ResNet-50 v1.5 (torchvision's ``resnet50``): 25,557,032 parameters at 1000 classes."""
    return ResNetSpec(shape, classes, stem_channels=64, stage_channels=(256, 512, 1024, 2048),
                      stage_strides=(1, 2, 2, 2), stem_kernel=7, stem_stride=2, stem_pool=True,
                      stage_blocks=(3, 4, 6, 3), bottleneck=True)

# Named models: the --model choices, each a spec for a dataset's input shape and classes.
MODELS: dict[str, Callable[[tuple[int, int, int], int], ModelSpec]] = {
    "resnet": lambda shape, classes: ResNetSpec(shape, classes),
    "resnet-nonorm": lambda shape, classes: ResNetSpec(shape, classes, norm=None),
    "resnet50": resnet50,
    "mlp": lambda shape, classes: MLPSpec(shape, classes),
    "vit": lambda shape, classes: ViTSpec(shape, classes),
    # a language model: the input shape is (context,), the classes its vocabulary
    "gpt": lambda shape, classes: GPTSpec(vocab=classes, context=shape[0]),
    # a detector: one heat map per class
    "centernet": lambda shape, classes: CenterNetSpec(shape, classes),
    "centernet-nonorm": lambda shape, classes: CenterNetSpec(shape, classes, norm=None),
}
MODEL_NAMES = tuple(MODELS)


def uses_batchnorm(model: str) -> bool:
    """Whether a named model has BatchNorm layers (what --sync-bn synchronizes), known before
    any data is loaded: its layers do not depend on the images' size, so any size tells."""
    return getattr(MODELS[model]((1, 8, 8), 2), "norm", None) is not None


# Sizes a named model takes from the command line (--width, --depth, --heads, --patch): the
# GPT's and the ViT's
SIZED_MODELS = ("gpt", "vit")
MODEL_SIZE = Bounds(1, 4096)
# The model's options (parbench.base.options); those owned by "model" are its sizes, which
# replace the spec's (build_spec refuses them for a model that has none).
MODEL_OPTIONS = (
    Option("model", str, "resnet", "resnet (default), resnet-nonorm, resnet50 (ResNet-50 "
           "v1.5), mlp, vit; gpt, a causal language model; centernet, centernet-nonorm, a "
           "detector (see parbench.contract.spec)", choices=lambda: tuple(MODELS),
           inputs=True),
    Option("width", int, help="--model gpt or vit: the model width (64; its MLP 4x when given)",
           owner="model", bounds=MODEL_SIZE, inputs=True),
    Option("depth", int, help="--model gpt or vit: transformer blocks (2)", owner="model",
           bounds=MODEL_SIZE, inputs=True),
    Option("heads", int, help="--model gpt or vit: attention heads, dividing the width (4)",
           owner="model", bounds=MODEL_SIZE, inputs=True),
    Option("patch", int, help="--model vit: the patch side, dividing the images' (4)",
           owner="model", bounds=MODEL_SIZE, inputs=True),
)
# the sizes only some of SIZED_MODELS have
SIZE_OF = {"patch": ("vit",)}


def build_spec(model: str, input_shape: tuple[int, ...], num_classes: int,
               sizes: dict[str, int] | None = None) -> ModelSpec:
    """The spec of a named model for a dataset's input shape and class count; ``sizes``
    (SIZED_MODELS only) replace its width, depth, heads or patch; a width given sets the MLP
    to 4 x it."""
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; choose one of {', '.join(MODELS)}")
    spec = MODELS[model](input_shape, num_classes)
    if sizes:
        for size in sizes:
            owners = SIZE_OF.get(size, SIZED_MODELS)
            if model not in owners:
                raise ValueError(f"--{size} is an option of --model {' / '.join(owners)}, "
                                 f"not of --model {model}")
        mlp = {"mlp_width": 4 * sizes["width"]} if "width" in sizes else {}
        spec = replace(spec, **sizes, **mlp)
    if hasattr(spec, "check"):
        spec.check()
    return spec


class Role(str, Enum):
    """What a tensor is to the optimizer and the initialiser (see ROLE_RULES)."""

    CONV_WEIGHT = "conv"
    CONV_BIAS = "conv_bias"
    DENSE_WEIGHT = "dense"
    DENSE_BIAS = "dense_bias"
    NORM_SCALE = "norm_scale"  # BatchNorm gamma, LayerNorm weight
    NORM_SHIFT = "norm_shift"  # BatchNorm beta, LayerNorm bias
    NORM_MEAN = "norm_mean"  # BatchNorm running statistics: state, not trained
    NORM_VAR = "norm_var"
    POSITION_EMBEDDING = "position_embedding"
    CLASS_TOKEN = "class_token"
    TOKEN_EMBEDDING = "token_embedding"  # a language model's; also its tied output projection
    HEAT_BIAS = "heat_bias"  # a detector's heat-map output bias: the prior of a face per cell


@dataclass(frozen=True)
class RoleRule:
    # he_normal | fan_in_uniform | normal_002 | ones | zeros (see parbench.contract.weights)
    init: str
    decay: bool  # AdamW's weight decay applies (matrices and embeddings; never norms, biases)
    trainable: bool = True


ROLE_RULES: dict[Role, RoleRule] = {
    Role.CONV_WEIGHT: RoleRule("he_normal", decay=True),
    Role.CONV_BIAS: RoleRule("zeros", decay=False),
    Role.DENSE_WEIGHT: RoleRule("fan_in_uniform", decay=True),
    Role.DENSE_BIAS: RoleRule("fan_in_uniform", decay=False),
    Role.NORM_SCALE: RoleRule("ones", decay=False),
    Role.NORM_SHIFT: RoleRule("zeros", decay=False),
    Role.NORM_MEAN: RoleRule("zeros", decay=False, trainable=False),
    Role.NORM_VAR: RoleRule("ones", decay=False, trainable=False),
    Role.POSITION_EMBEDDING: RoleRule("normal_002", decay=True),
    Role.CLASS_TOKEN: RoleRule("normal_002", decay=True),
    Role.TOKEN_EMBEDDING: RoleRule("normal_002", decay=True),
    Role.HEAT_BIAS: RoleRule("focal_prior", decay=False),
}


@dataclass(frozen=True)
class Param:
    """One tensor of the canonical weights: conv kernels OIHW, dense kernels [out, in]."""

    shape: tuple[int, ...]
    role: Role

    @property
    def trainable(self) -> bool:
        return ROLE_RULES[self.role].trainable

    @property
    def decays(self) -> bool:
        return ROLE_RULES[self.role].decay


def _conv(params: dict, prefix: str, c_in: int, c_out: int, k: int, norm: bool) -> None:
    params[f"{prefix}.conv.weight"] = Param((c_out, c_in, k, k), Role.CONV_WEIGHT)
    if norm:
        for suffix, role in (("weight", Role.NORM_SCALE), ("bias", Role.NORM_SHIFT),
                             ("running_mean", Role.NORM_MEAN), ("running_var", Role.NORM_VAR)):
            params[f"{prefix}.bn.{suffix}"] = Param((c_out,), role)
    else:
        params[f"{prefix}.conv.bias"] = Param((c_out,), Role.CONV_BIAS)


def _dense(params: dict, prefix: str, n_in: int, n_out: int) -> None:
    params[f"{prefix}.weight"] = Param((n_out, n_in), Role.DENSE_WEIGHT)
    params[f"{prefix}.bias"] = Param((n_out,), Role.DENSE_BIAS)


def _layer_norm(params: dict, prefix: str, width: int) -> None:
    params[f"{prefix}.weight"] = Param((width,), Role.NORM_SCALE)
    params[f"{prefix}.bias"] = Param((width,), Role.NORM_SHIFT)


class BlockLayout(NamedTuple):
    """One residual block: its canonical name, channels, stride, whether its shortcut is a
    projection, and the inner width of a bottleneck (0: a basic block of two 3x3s)."""

    name: str
    c_in: int
    c_out: int
    stride: int
    projection: bool
    inner: int


def resnet_blocks(spec: Backbone) -> list[BlockLayout]:
    """Every residual block, in order: ``stage_blocks[i]`` per stage, the first of a stage at
    its stride, numbered through the stages."""
    blocks, c_in = [], spec.stem_channels
    stages = zip(spec.stage_channels, spec.stage_strides, spec.stage_blocks)
    for c_out, stage_stride, count in stages:
        for k in range(count):
            stride = stage_stride if k == 0 else 1
            blocks.append(BlockLayout(f"blocks.{len(blocks)}", c_in, c_out, stride,
                                      stride != 1 or c_in != c_out,
                                      c_out // 4 if spec.bottleneck else 0))
            c_in = c_out
    return blocks


def block_convs(block: BlockLayout) -> list[tuple[str, int, int, int, int]]:
    """(name, c_in, c_out, kernel, stride) of a block's convolutions, shortcut last: two 3x3s,
    the first strided; or a bottleneck's 1x1, 3x3 (strided, v1.5) and 1x1."""
    if block.inner:
        convs = [("conv1", block.c_in, block.inner, 1, 1),
                 ("conv2", block.inner, block.inner, 3, block.stride),
                 ("conv3", block.inner, block.c_out, 1, 1)]
    else:
        convs = [("conv1", block.c_in, block.c_out, 3, block.stride),
                 ("conv2", block.c_out, block.c_out, 3, 1)]
    if block.projection:
        convs.append(("shortcut", block.c_in, block.c_out, 1, block.stride))
    return convs


def _mlp_parameters(spec: MLPSpec) -> dict[str, Param]:
    params: dict[str, Param] = {}
    n_in = spec.input_shape[0] * spec.input_shape[1] * spec.input_shape[2]
    for i, width in enumerate(spec.hidden):
        _dense(params, f"hidden.{i}", n_in, width)
        n_in = width
    _dense(params, "head", n_in, spec.num_classes)
    return params


def _backbone_parameters(spec: Backbone) -> dict[str, Param]:
    """The stem and the residual blocks, which the ResNet and the detector share."""
    params: dict[str, Param] = {}
    norm = spec.norm is not None
    _conv(params, "stem", spec.input_shape[0], spec.stem_channels, spec.stem_kernel, norm)
    for block in resnet_blocks(spec):
        for conv, c_in, c_out, kernel, _stride in block_convs(block):
            _conv(params, f"{block.name}.{conv}", c_in, c_out, kernel, norm)
    return params


def _resnet_parameters(spec: ResNetSpec) -> dict[str, Param]:
    params = _backbone_parameters(spec)
    _dense(params, "head", spec.stage_channels[-1], spec.num_classes)
    return params


def _transformer_blocks(params: dict, spec: ViTSpec | GPTSpec) -> None:
    """The pre-norm blocks and final LayerNorm the ViT and the GPT share."""
    width = spec.width
    for i in range(spec.depth):
        _layer_norm(params, f"blocks.{i}.norm1", width)
        _dense(params, f"blocks.{i}.attn.qkv", width, 3 * width)
        _dense(params, f"blocks.{i}.attn.proj", width, width)
        _layer_norm(params, f"blocks.{i}.norm2", width)
        _dense(params, f"blocks.{i}.mlp.fc1", width, spec.mlp_width)
        _dense(params, f"blocks.{i}.mlp.fc2", spec.mlp_width, width)
    _layer_norm(params, "norm", width)


def _vit_parameters(spec: ViTSpec) -> dict[str, Param]:
    width = spec.width
    params = {"patch.weight": Param((width, spec.input_shape[0], spec.patch, spec.patch),
                                    Role.CONV_WEIGHT),
              "patch.bias": Param((width,), Role.CONV_BIAS),
              "class_token": Param((1, 1, width), Role.CLASS_TOKEN),
              "position_embedding": Param((1, spec.tokens, width), Role.POSITION_EMBEDDING)}
    _transformer_blocks(params, spec)
    _dense(params, "head", width, spec.num_classes)
    return params


def _gpt_parameters(spec: GPTSpec) -> dict[str, Param]:
    """No head: the output projection is the token embedding (tied)."""
    params = {"token_embedding": Param((spec.vocab, spec.width), Role.TOKEN_EMBEDDING),
              "position_embedding": Param((spec.context, spec.width), Role.POSITION_EMBEDDING)}
    _transformer_blocks(params, spec)
    return params


def _centernet_parameters(spec: CenterNetSpec) -> dict[str, Param]:
    """The ResNet's backbone without its dense head, then per head a 3x3 convolution with bias
    and a 1x1 one to its maps (the heat map's bias starting at the prior, HEAT_BIAS)."""
    params = _backbone_parameters(spec)
    for head, maps in spec.heads:
        _conv(params, f"heads.{head}.hidden", spec.stage_channels[-1], spec.head_channels, 3,
              norm=False)
        _conv(params, f"heads.{head}.out", spec.head_channels, maps, 1, norm=False)
    params["heads.heat.out.conv.bias"] = Param((spec.num_classes,), Role.HEAT_BIAS)
    return params


@dataclass(frozen=True)
class ModelKind:
    """A model family: its spec class, its tensors, and how a job file's JSON restores it."""

    spec: type
    parameters: Callable[[ModelSpec], dict[str, Param]]
    tuples: tuple[str, ...]  # fields JSON turns into lists


KINDS: dict[str, ModelKind] = {
    "resnet": ModelKind(ResNetSpec, _resnet_parameters,
                        ("stage_channels", "stage_strides", "stage_blocks")),
    "mlp": ModelKind(MLPSpec, _mlp_parameters, ("hidden",)),
    "vit": ModelKind(ViTSpec, _vit_parameters, ()),
    "gpt": ModelKind(GPTSpec, _gpt_parameters, ()),
    "centernet": ModelKind(CenterNetSpec, _centernet_parameters,
                           ("stage_channels", "stage_strides", "stage_blocks")),
}


def kind_of(spec_or_kind: ModelSpec | str) -> ModelKind:
    """The registry entry of a spec (or a kind name); an unknown kind is an error."""
    kind = spec_or_kind if isinstance(spec_or_kind, str) else spec_or_kind.kind
    if kind not in KINDS:
        raise ValueError(f"unknown model kind {kind!r}; known: {', '.join(KINDS)}")
    return KINDS[kind]


def parameters(spec: ModelSpec) -> dict[str, Param]:
    """Every tensor of the model, by canonical name, in the order they are initialised."""
    return kind_of(spec).parameters(spec)


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


# Fields a kind gained after records of it were published: left out of spec_dict where they
# keep their default, so the models that existed before keep their spec hash (the records'
# names and --resume's matches; parbench.launch.harness.spec_hash)
LATER_FIELDS = {kind: ("stem_kernel", "stem_stride", "stem_pool", "stage_blocks", "bottleneck")
                for kind in ("resnet", "centernet")}


def spec_dict(spec: ModelSpec) -> dict:
    data = asdict(spec)
    for name in LATER_FIELDS.get(spec.kind, ()):
        if getattr(spec, name) == getattr(type(spec), name):
            del data[name]
    return data


def spec_from_dict(data: dict) -> ModelSpec:
    """Inverse of spec_dict (job files carry the spec as JSON)."""
    data = dict(data)
    kind = kind_of(data["kind"])
    if "input_shape" in data:  # a field of the image models; the GPT's is a property
        data["input_shape"] = tuple(data["input_shape"])
    for name in kind.tuples:
        if name in data:
            data[name] = tuple(data[name])
    if data.get("norm") is not None:
        data["norm"] = BatchNormSpec(**data["norm"])
    return kind.spec(**data)


def sha256_of(obj) -> str:
    """Stable hash of JSON-able data (sorted keys)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()
