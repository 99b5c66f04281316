"""Model FLOPs from the spec alone: what one sample costs, forward and training, in every
framework alike (the figure utilisation and achieved FLOP/s are computed from).

What is counted, and how (the conventions torchtitan's, nanoGPT's and PaLM's MFU use):

* The multiply-adds of the matrix products, each multiply-add 2 FLOPs: convolutions (the
  ResNet's, and the ViT's patch embedding), dense layers (hidden layers and heads, the
  transformers' ``qkv``, ``proj``, ``fc1``, ``fc2``, the GPT's tied output projection
  ``norm(x) @ token_embedding^T``), and attention's two products per head, ``q k^T`` and the
  attention weights times ``v``.
* Attention is counted whole: the T x T score matrix, also under the GPT's causal mask. JAX,
  TensorFlow and Paddle compute every score and then mask, and torch's counter and PaLM's and
  nanoGPT's ``12 * L * H * d * T`` per token (training) count them all too. The causal factor:
  a query sees T(T + 1)/2 of the T^2 scores, so a count of the unmasked ones only would be
  ``(T + 1) / (2T)`` of the attention term, about half; fused causal kernels (flash attention,
  torch's CPU kernel among them) skip most masked blocks, doing nearer that half.
* Training = forward + backward, the backward counted as twice the forward (the gradient of a
  product's input and of its weight, one product each; no activation recomputation): training
  is 3 x forward. What a framework runs is ``first_layer`` less: nobody computes the gradient
  of the data, so the layer that reads it (the stem convolution, the patch embedding, the
  MLP's first dense layer; none in the GPT, which reads the data by embedding lookup) has only
  its weight gradient. ``training_computed_per_sample`` is that: 0.98 x the convention for the
  default ResNet, 0.99 for the ViT, 1 for the GPT, but 0.67 for the MLP, whose first layer is
  98% of its products.
* Left out: biases (one add per output element, beside the fan-in multiply-adds), norms,
  activations, softmax and its scaling, residual adds, pooling, embedding lookups and the
  position embedding's add, the loss, and the optimizer's update. They are elementwise:
  O(activations) per sample where the products are O(activations x fan-in).

A sample is what the task's batch holds one of: an image, or one language-model row of
``context`` tokens (parbench.contract.tasks.LanguageModeling), whose tokens throughput counts;
``items_per_sample`` says how many (1 for an image).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .spec import (
    Backbone,
    CenterNetSpec,
    GPTSpec,
    MLPSpec,
    ModelSpec,
    ResNetSpec,
    ViTSpec,
    block_convs,
    kind_of,
    resnet_blocks,
)

FLOPS_PER_MULTIPLY_ADD = 2
TRAINING_PER_FORWARD = 3  # forward + backward, the backward twice the forward
LAYER_KINDS = ("conv", "dense", "attention")
COUNTER_ROWS = 8  # the batch frameworks' own counters run (frameworks/*/flops.py)


@dataclass(frozen=True)
class ModelFlops:
    """Forward FLOPs of one sample by layer kind, and of its layer that reads the data."""

    conv: int
    dense: int
    attention: int
    first_layer: int  # included in conv or dense: its input gradient is never computed
    items_per_sample: int = 1  # what throughput counts per sample: tokens of a row, or 1

    @property
    def breakdown(self) -> dict[str, int]:
        return {kind: getattr(self, kind) for kind in LAYER_KINDS}

    @property
    def forward_per_sample(self) -> int:
        return self.conv + self.dense + self.attention

    @property
    def training_per_sample(self) -> int:
        """The convention: 3 x forward (the figure MFU is quoted in)."""
        return TRAINING_PER_FORWARD * self.forward_per_sample

    @property
    def training_computed_per_sample(self) -> int:
        """What a framework's step runs: the convention less the data's gradient, which no
        framework computes (the first layer's input gradient, one forward's worth)."""
        return self.training_per_sample - self.first_layer

    @property
    def forward_per_item(self) -> float:
        """Per token for a language model: the unit its throughput is in."""
        return self.forward_per_sample / self.items_per_sample


@dataclass(frozen=True)
class Conv:
    """One convolution of a model on one image: channels in and out, a square kernel, its
    stride and padding (on every side), and the input's (height, width)."""

    c_in: int
    c_out: int
    kernel: int
    stride: int
    padding: int
    size: tuple[int, int]

    @property
    def output_size(self) -> tuple[int, int]:
        return tuple((s + 2 * self.padding - self.kernel) // self.stride + 1 for s in self.size)

    @property
    def multiply_adds(self) -> int:
        """Every output element sums kernel x kernel x c_in products, those on the zero
        padding included, as the kernels compute them."""
        height, width = self.output_size
        return height * width * self.c_out * self.c_in * self.kernel * self.kernel


def resnet_convs(spec: Backbone) -> list[Conv]:
    """Every convolution of the ResNet in order: the stem, then per block its convolutions and
    its 1x1 projection shortcut where it has one (parbench.contract.spec.block_convs). The
    stem's max-pool, where there is one, halves the size the first block reads."""
    channels, height, width = spec.input_shape
    stem = Conv(channels, spec.stem_channels, spec.stem_kernel, spec.stem_stride,
                spec.stem_kernel // 2, (height, width))
    convs, size = [stem], stem.output_size
    if spec.stem_pool:  # 3x3, stride 2, padding 1
        size = tuple((s + 2 - 3) // 2 + 1 for s in size)
    for block in resnet_blocks(spec):
        block_input, inner = size, size
        for _name, c_in, c_out, kernel, stride in block_convs(block):
            source = block_input if _name in ("conv1", "shortcut") else inner
            conv = Conv(c_in, c_out, kernel, stride, kernel // 2, source)
            convs.append(conv)
            if _name != "shortcut":
                inner = conv.output_size
        size = inner
    return convs


def patch_conv(spec: ViTSpec) -> Conv:
    """The ViT's patch embedding: kernel = stride = patch, no padding."""
    channels, height, width = spec.input_shape
    return Conv(channels, spec.width, spec.patch, spec.patch, 0, (height, width))


def _resnet(spec: ResNetSpec) -> ModelFlops:
    """The convolutions, then the head on the pooled features. With BatchNorm or with conv
    biases instead, the same count."""
    convs = resnet_convs(spec)
    return _flops(conv=sum(conv.multiply_adds for conv in convs),
                  dense=spec.stage_channels[-1] * spec.num_classes,
                  first_layer=convs[0].multiply_adds)


def _mlp(spec: MLPSpec) -> ModelFlops:
    widths = [spec.input_shape[0] * spec.input_shape[1] * spec.input_shape[2], *spec.hidden,
              spec.num_classes]
    layers = [n_in * n_out for n_in, n_out in zip(widths, widths[1:])]
    return _flops(dense=sum(layers), first_layer=layers[0])


def _blocks(spec: ViTSpec | GPTSpec, tokens: int) -> tuple[int, int]:
    """(dense, attention) multiply-adds of the transformer blocks on one row of ``tokens``.
    Per head, q k^T is T x T x d and weights x v T x T x d; heads x d = width."""
    width, hidden = spec.width, spec.mlp_width
    dense = tokens * (width * 3 * width + width * width + width * hidden + hidden * width)
    attention = 2 * tokens * tokens * width
    return spec.depth * dense, spec.depth * attention


def _vit(spec: ViTSpec) -> ModelFlops:
    """The patch embedding (one conv, kernel = stride = patch, a product per patch pixel and
    channel), the blocks on every token, the head on the class token's row only."""
    patch = patch_conv(spec).multiply_adds
    dense, attention = _blocks(spec, spec.tokens)
    return _flops(conv=patch, dense=dense + spec.width * spec.num_classes,
                  attention=attention, first_layer=patch)


def _gpt(spec: GPTSpec) -> ModelFlops:
    """A row of ``context`` tokens: the blocks, then the tied output projection at every
    position. The embeddings are lookups, so no product reads the data: first_layer 0."""
    dense, attention = _blocks(spec, spec.context)
    output = spec.context * spec.width * spec.vocab
    return _flops(dense=dense + output, attention=attention, first_layer=0,
                  items_per_sample=spec.context)


def centernet_head_convs(spec: CenterNetSpec) -> list[Conv]:
    """Each head's 3x3 and 1x1 convolutions on the backbone's stride-4 map, in head order."""
    size = resnet_convs(spec)[-1].output_size
    return [conv for _, maps in spec.heads
            for conv in (Conv(spec.stage_channels[-1], spec.head_channels, 3, 1, 1, size),
                         Conv(spec.head_channels, maps, 1, 1, 0, size))]


def _centernet(spec: CenterNetSpec) -> ModelFlops:
    """The backbone's convolutions, then the heads'. No dense layer, no pooling."""
    convs = resnet_convs(spec) + centernet_head_convs(spec)
    return _flops(conv=sum(conv.multiply_adds for conv in convs),
                  first_layer=convs[0].multiply_adds)


def _flops(conv: int = 0, dense: int = 0, attention: int = 0, first_layer: int = 0,
           items_per_sample: int = 1) -> ModelFlops:
    """Multiply-adds to FLOPs."""
    f = FLOPS_PER_MULTIPLY_ADD
    return ModelFlops(conv=f * conv, dense=f * dense, attention=f * attention,
                      first_layer=f * first_layer, items_per_sample=items_per_sample)


COUNTERS: dict[str, Callable[[ModelSpec], ModelFlops]] = {
    "resnet": _resnet, "mlp": _mlp, "vit": _vit, "gpt": _gpt, "centernet": _centernet}


def model_flops(spec: ModelSpec) -> ModelFlops:
    """The spec's FLOPs per sample; an unknown kind is a ValueError naming the known ones."""
    kind_of(spec)
    if spec.kind not in COUNTERS:
        raise ValueError(f"no FLOP count for model kind {spec.kind!r}")
    return COUNTERS[spec.kind](spec)


def step_flops(spec: ModelSpec, global_batch: int) -> int:
    """Training FLOPs of one optimizer step (the convention, 3 x forward) over the global
    batch, on all devices together; gradient accumulation splits the same batch, so the same
    figure."""
    return global_batch * model_flops(spec).training_per_sample


def counter_input(spec: ModelSpec, seed: int = 0) -> np.ndarray:
    """The batch each framework's FLOP counter runs the spec's model on (frameworks/*/flops.py,
    checked against this module in tests/test_flops.py): COUNTER_ROWS random rows, images
    float32, a language model's token ids int64 (more than one row, so that the batch
    dimension is really a batch: BatchNorm takes batch statistics)."""
    rng = np.random.default_rng(seed)
    shape = (COUNTER_ROWS, *spec.input_shape)
    if isinstance(spec, GPTSpec):
        return rng.integers(0, spec.vocab, shape, dtype=np.int64)
    return rng.normal(0, 1, shape).astype(np.float32)
