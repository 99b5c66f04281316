"""The spec's vision transformer (parbench.spec.ViTSpec) as a pure JAX function over the
canonical weights, and the transformer block it shares with the GPT (gpt.py), causal there.

Nothing is converted: the patch convolution's kernel is OIHW and the batch NCHW (layers.conv2d),
dense kernels are [out, in] (layers.dense), and the fused qkv keeps torch's ``in_proj_weight``
rows, so its output splits as (3, heads, d) directly. No BatchNorm and dropout 0: the forward
is the same in training and inference mode.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import lax

from parbench.contract.spec import GPTSpec, ViTSpec

from .layers import PRECISION, Params, conv2d, dense


def layer_norm(x: jax.Array, params: Params, prefix: str,
               spec: ViTSpec | GPTSpec) -> jax.Array:
    """LayerNorm over the width, biased variance, the spec's eps (the ViT's 1e-6, the GPT's
    1e-5; flax's default is 1e-6, torch's 1e-5, Keras' 1e-3: spelled out, not inherited)."""
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * lax.rsqrt(var + spec.norm_eps) * params[f"{prefix}.weight"] + \
        params[f"{prefix}.bias"]


def gelu(x: jax.Array) -> jax.Array:
    # the exact erf GELU: jax.nn.gelu defaults to approximate=True (tanh), unlike torch's
    # F.gelu, so the choice is spelled out
    return jax.nn.gelu(x, approximate=False)


# --- attention: one fused qkv projection, torch's in_proj_weight layout
def causal_mask(tokens: int) -> jax.Array:
    """(query, key) -> whether the query may attend to the key: keys 0..i for query i."""
    return jnp.tril(jnp.ones((tokens, tokens), bool))


def attention(x: jax.Array, params: Params, prefix: str, spec: ViTSpec | GPTSpec,
              causal: bool = False) -> jax.Array:
    """Multi-head self-attention with the canonical fused projection: the 3 * width outputs of
    ``qkv`` are q | k | v, each ``heads`` consecutive blocks of ``width / heads``; per head
    ``softmax(q k^T / sqrt(d)) v``; the heads, concatenated in order, feed ``proj``.
    ``causal``: the scores above the diagonal are -inf before the softmax, as the spec says (the
    diagonal is never masked, so no row is all -inf).

    Written out rather than ``jax.nn.dot_product_attention(is_causal=True)``, which matches
    torch as closely on the CPU (both within 5.1e-7 of torch's logits on the parity GPT,
    measured) but takes no precision: its float32 products trace with ``precision=None`` (jax
    0.10.2), the default, which GPUs may run as TF32 (layers.py); here both keep
    ``PRECISION``, like every other matmul of the models, and the ViT's and the GPT's attention
    stay one function."""
    batch, tokens, width = x.shape
    d = width // spec.heads
    qkv = dense(x, params, f"{prefix}.qkv").reshape(batch, tokens, 3, spec.heads, d)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]  # each (B, T, heads, d)
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k, precision=PRECISION) / math.sqrt(d)
    if causal:  # one (T, T) mask, broadcast over batch and heads
        scores = jnp.where(causal_mask(tokens), scores, -jnp.inf)
    weights = jax.nn.softmax(scores, axis=-1)
    out = jnp.einsum("bhqk,bkhd->bqhd", weights, v, precision=PRECISION)
    return dense(out.reshape(batch, tokens, width), params, f"{prefix}.proj")


# --- block: pre-norm residual attention, then pre-norm residual MLP
def block(x: jax.Array, params: Params, prefix: str, spec: ViTSpec | GPTSpec,
          causal: bool = False) -> jax.Array:
    x = x + attention(layer_norm(x, params, f"{prefix}.norm1", spec), params, f"{prefix}.attn",
                      spec, causal)
    hidden = gelu(dense(layer_norm(x, params, f"{prefix}.norm2", spec), params,
                        f"{prefix}.mlp.fc1"))
    return x + dense(hidden, params, f"{prefix}.mlp.fc2")


def apply(spec: ViTSpec, params: Params, x: jax.Array) -> jax.Array:
    """Logits of the NCHW batch ``x``."""
    # patch embedding: kernel = stride = patch, no padding, with bias -> (B, width, H/p, W/p)
    patches = conv2d(x, params["patch.weight"], spec.patch, 0) + \
        params["patch.bias"].reshape(1, -1, 1, 1)
    batch, width = patches.shape[:2]
    # row-major over (H/p, W/p): token i * W/p + j is patch row i, column j, as the spec says
    tokens = patches.reshape(batch, width, -1).transpose(0, 2, 1)
    cls = jnp.broadcast_to(params["class_token"], (batch, 1, width))
    x = jnp.concatenate([cls, tokens], axis=1) + params["position_embedding"]
    for i in range(spec.depth):
        x = block(x, params, f"blocks.{i}", spec)
    return dense(layer_norm(x, params, "norm", spec)[:, 0], params, "head")  # class token row
