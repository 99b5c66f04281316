"""The layers every Flax model of the spec shares: convolutions and dense layers at the spec's
precision, LayerNorm with the spec's arithmetic, torch's BatchNorm (which Flax's cannot be),
the convolution + norm and the residual block the ResNet and the detector's backbone share
(model.py, centernet.py; torch keeps them in its layers.py too), and how the canonical weights
map onto a module's variables.

Activations are NHWC inside the models, Flax's layout (``nnx.Conv`` takes channels last): a
batch arrives NCHW, as the contract stores it, and is transposed once at the model's input.
Flax keeps kernels as HWIO (convolutions) and [in, out] (dense), the canonical weights are OIHW
and [out, in]: ``to_flax`` and ``to_canonical`` transpose them on the way in and out, which is
exact, so an export returns the bits that were loaded.

Matmuls and convolutions run at ``PRECISION``: HIGHEST, true float32, what the spec's float32
means. On the CPU it changes nothing (XLA's default already computes float32 there: the parity
forward gives the same bits with either, measured). On recent GPUs JAX's default lets float32
dots and convolutions run as TF32 (JAX's "Matmul precision" page), 10 mantissa bits instead of
23; torch's default is float32 for matmuls but TF32 for cuDNN convolutions
(``torch.backends.cudnn.allow_tf32``), so on a GPU the two differ by default either way.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen, nnx
from jax import lax

from parbench.contract.spec import (
    Backbone,
    BatchNormSpec,
    BlockLayout,
    block_convs,
    resnet_blocks,
)

Params = nnx.State  # the trainable variables (nnx.Param) of a model, as nnx.split gives them
Stats = nnx.State  # BatchNorm running statistics (nnx.BatchStat); empty for a model without

PRECISION = lax.Precision.HIGHEST


def conv(c_in: int, c_out: int, kernel: int, stride: int, padding: int, bias: bool,
         dtype: jnp.dtype, rngs: nnx.Rngs) -> nnx.Conv:
    """A square convolution with ``padding`` zeros on every side: the spec's symmetric padding,
    torch's. Flax's ``padding="SAME"`` is not it: with stride 2 on an even size it pads 0
    before and 1 after, where torch pads 1 on both sides, which shifts every window by one."""
    return nnx.Conv(c_in, c_out, (kernel, kernel), strides=stride,
                    padding=((padding, padding), (padding, padding)), use_bias=bias,
                    dtype=dtype, precision=PRECISION, rngs=rngs)


def dense(n_in: int, n_out: int, dtype: jnp.dtype, rngs: nnx.Rngs) -> nnx.Linear:
    return nnx.Linear(n_in, n_out, dtype=dtype, precision=PRECISION, rngs=rngs)


def layer_norm(width: int, eps: float, dtype: jnp.dtype, rngs: nnx.Rngs) -> nnx.LayerNorm:
    """LayerNorm over the width with the spec's eps (the ViT's 1e-6, the GPT's 1e-5; Flax's
    default is 1e-6, torch's 1e-5, Keras' 1e-3: spelled out, not inherited), its variance taken
    as torch takes it, from the deviations (``use_fast_variance=False``; Flax's default is the
    mean of squares minus the squared mean, which cancels digits)."""
    return nnx.LayerNorm(width, epsilon=eps, use_fast_variance=False, dtype=dtype, rngs=rngs)


class BatchNorm(nnx.Module):
    """The spec's BatchNorm, torch's ``BatchNorm2d`` on NHWC. ``nnx.BatchNorm`` cannot be it:
    Flax updates the running variance with the *biased* batch variance and weighs the old
    value by ``momentum`` (torch: the unbiased one, and ``1 - momentum``), so its running
    statistics, and every evaluation after the first step, would differ from torch's.

    In training (``use_running_average`` False, what ``Module.train()`` sets) it normalises
    with the batch mean and biased variance and updates the running statistics; in inference
    (``Module.eval()``) it normalises with them. ``axis_name``: a pmap / shard_map axis over
    which the batch statistics are taken (synchronized BatchNorm), None: this device's rows.
    It computes in float32 whatever its input's dtype, and returns that dtype (under --precision
    bf16, as torch's autocast keeps batch_norm in float32)."""

    def __init__(self, channels: int, norm: BatchNormSpec):
        self.weight = nnx.Param(jnp.ones((channels,), jnp.float32))
        self.bias = nnx.Param(jnp.zeros((channels,), jnp.float32))
        self.running_mean = nnx.BatchStat(jnp.zeros((channels,), jnp.float32))
        self.running_var = nnx.BatchStat(jnp.ones((channels,), jnp.float32))
        self.momentum, self.eps = norm.momentum, norm.eps
        self.use_running_average = False
        self.axis_name: str | None = None

    def __call__(self, x: jax.Array) -> jax.Array:
        dtype, x = x.dtype, x.astype(jnp.float32)
        if self.use_running_average:
            mean, var = self.running_mean[...], self.running_var[...]
        else:
            mean, squares, count = moments(x, self.axis_name)
            var = squares / count
            m = self.momentum
            unbiased = lax.stop_gradient(squares / (count - 1))
            self.running_mean[...] = (1 - m) * self.running_mean[...] + \
                m * lax.stop_gradient(mean)
            self.running_var[...] = (1 - m) * self.running_var[...] + m * unbiased
        scale = self.weight[...] * lax.rsqrt(var + self.eps)
        return ((x - mean) * scale + self.bias[...]).astype(dtype)


def moments(x: jax.Array, axis_name: str | None) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Per-channel mean, sum of squared deviations and row count of an NHWC batch; with
    ``axis_name`` over every device's rows on that axis (exact: each device's sums are added
    with ``psum``, and the deviations are taken from the global mean, so nothing depends on
    the split). Two passes, like torch's CPU kernel: a mean of squares minus the squared mean
    cancels digits when the mean is large against the spread (the parity batch shifted by +10:
    running variances 2.5e-6 from torch that way, 8.4e-8 this way). Under ``axis_name`` that
    costs two all-reduces per layer instead of one."""
    axes = (0, 1, 2)
    count = jnp.asarray(x.shape[0] * x.shape[1] * x.shape[2], jnp.float32)
    total = jnp.sum(x, axes)
    if axis_name is not None:
        total, count = lax.psum((total, count), axis_name)
    mean = total / count
    squares = jnp.sum(jnp.square(x - mean), axes)
    if axis_name is not None:
        squares = lax.psum(squares, axis_name)
    return mean, squares, count


# --- the ResNet's and the detector's backbone layers (parbench.contract.spec conventions)
class ConvNorm(nnx.Module):
    """conv (bias only without norm; 3x3 pads 1, 1x1 pads 0), then the spec's BatchNorm."""

    def __init__(self, c_in: int, c_out: int, kernel: int, stride: int,
                 norm: BatchNormSpec | None, dtype: jnp.dtype, rngs: nnx.Rngs):
        self.conv = conv(c_in, c_out, kernel, stride, kernel // 2, norm is None, dtype, rngs)
        self.bn = BatchNorm(c_out, norm) if norm is not None else None

    def __call__(self, x: jax.Array) -> jax.Array:
        x = self.conv(x)
        return x if self.bn is None else self.bn(x)


class Stem(ConvNorm):
    """The stem: ``relu(norm(conv(x)))``, then the spec's max-pool where it has one
    (``flax.linen.max_pool`` pads with -inf, as torch does)."""

    def __init__(self, spec: Backbone, dtype: jnp.dtype, rngs: nnx.Rngs):
        super().__init__(spec.input_shape[0], spec.stem_channels, spec.stem_kernel,
                         spec.stem_stride, spec.norm, dtype, rngs)
        self.pool = spec.stem_pool

    def __call__(self, x: jax.Array) -> jax.Array:
        x = nnx.relu(super().__call__(x))
        if not self.pool:
            return x
        return linen.max_pool(x, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))


class ResidualBlock(nnx.Module):
    """A residual block (basic or bottleneck, parbench.contract.spec.block_convs): its
    convolutions in order with a ReLU between, plus the shortcut, then a ReLU."""

    def __init__(self, layout: BlockLayout, norm: BatchNormSpec | None, dtype: jnp.dtype,
                 rngs: nnx.Rngs):
        convs = block_convs(layout)
        self.path = tuple(name for name, *_ in convs if name != "shortcut")
        for name, c_in, c_out, kernel, stride in convs:
            setattr(self, name, ConvNorm(c_in, c_out, kernel, stride, norm, dtype, rngs))
        if not layout.projection:
            self.shortcut = None

    def __call__(self, x: jax.Array) -> jax.Array:
        out = x
        for i, name in enumerate(self.path):
            out = getattr(self, name)(out if i == 0 else nnx.relu(out))
        return nnx.relu(out + (x if self.shortcut is None else self.shortcut(x)))


def stem_and_blocks(spec: Backbone, dtype: jnp.dtype, rngs: nnx.Rngs) -> tuple[Stem, nnx.List]:
    """The ResNet's and the detector's feature extractor: the stem and the residual blocks of
    parbench.contract.spec.resnet_blocks, under the names the canonical weights use."""
    blocks = nnx.List([ResidualBlock(layout, spec.norm, dtype, rngs)
                       for layout in resnet_blocks(spec)])
    return Stem(spec, dtype, rngs), blocks


# --- canonical weights <-> a module's variables, by path: ("blocks", 0, "attn", "qkv",
# "kernel") is "blocks.0.attn.qkv.weight"; what a path's last name says decides the layout
RENAMED = {"kernel": "weight", "scale": "weight"}  # Flax's names for torch's
EMBEDDING = "embedding"  # nnx.Embed's table: the canonical name is the Embed's own


def canonical_name(path: tuple) -> str:
    *prefix, leaf = (str(part) for part in path)
    if leaf == EMBEDDING:
        return ".".join(prefix)
    return ".".join([*prefix, RENAMED.get(leaf, leaf)])


def to_flax(path: tuple, array: np.ndarray) -> np.ndarray:
    """A canonical array in the layout of the variable at ``path``."""
    if path[-1] == "kernel":
        return array.transpose(2, 3, 1, 0) if array.ndim == 4 else array.T  # OIHW / [out, in]
    return array


def to_canonical(path: tuple, array: np.ndarray) -> np.ndarray:
    """The variable at ``path`` in the canonical layout (``to_flax`` undone)."""
    if path[-1] == "kernel":
        return array.transpose(3, 2, 0, 1) if array.ndim == 4 else array.T  # HWIO / [in, out]
    return array
