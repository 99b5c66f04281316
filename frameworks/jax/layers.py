"""The layers every model of the spec shares, as pure JAX functions over the canonical
weights: a convolution and a dense layer in the canonical layouts, and the precision they run
at. model.py (the ResNet, the MLP) and vit.py (the vision transformer) both build on them;
each model's own layers (BatchNorm, LayerNorm, attention) stay with the model.

Parameters are a flat dict keyed by the canonical names in the canonical layouts (conv kernels
OIHW, dense kernels [out, in]) and activations are NCHW, like torch's: convolutions are
``lax.conv_general_dilated`` with dimension numbers ("NCHW", "OIHW", "NCHW"), dense layers
``x @ w.T + b``, so weights go in and out without a transpose.

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
from jax import lax

Params = dict[str, jax.Array]  # trainable tensors, canonical names and layouts
Stats = dict[str, jax.Array]  # BatchNorm running statistics ({} for a model without norm)

PRECISION = lax.Precision.HIGHEST
CONV_DIMENSIONS = ("NCHW", "OIHW", "NCHW")  # the canonical layouts: no transposes


def conv2d(x: jax.Array, weight: jax.Array, stride: int, padding: int) -> jax.Array:
    """NCHW x OIHW -> NCHW, ``padding`` zeros on every side (the spec's symmetric padding)."""
    return lax.conv_general_dilated(x, weight, (stride, stride), ((padding, padding),) * 2,
                                    dimension_numbers=CONV_DIMENSIONS, precision=PRECISION)


def dense(x: jax.Array, params: Params, prefix: str) -> jax.Array:
    """``x @ weight.T + bias`` with the canonical [out, in] kernel."""
    return jnp.matmul(x, params[f"{prefix}.weight"].T, precision=PRECISION) + \
        params[f"{prefix}.bias"]
