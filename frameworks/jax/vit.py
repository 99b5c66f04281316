"""The spec's vision transformer (parbench.spec.ViTSpec) as a Flax NNX module, and the
transformer block it shares with the GPT (gpt.py), causal there.

The attention keeps torch's fused projection: one ``qkv`` dense layer whose 3 * width outputs
are q | k | v, each ``heads`` consecutive blocks of ``width / heads`` (``in_proj_weight``'s
rows), so the canonical weights load without regrouping. No BatchNorm and dropout 0: the
forward is the same in training and inference mode.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx
from flax.nnx.nn.attention import dot_product_attention_weights

from parbench.contract.spec import GPTSpec, ViTSpec

from .layers import PRECISION, conv, dense, layer_norm


def gelu(x: jax.Array) -> jax.Array:
    # the exact erf GELU: jax.nn.gelu defaults to approximate=True (tanh), unlike torch's
    # F.gelu, so the choice is spelled out
    return nnx.gelu(x, approximate=False)


class SelfAttention(nnx.Module):
    """Multi-head self-attention, per head ``softmax(q k^T / sqrt(d)) v``, the heads
    concatenated in order into ``proj``; ``causal``: a query attends to keys 0..i only.

    The weights come from Flax's ``dot_product_attention_weights`` with ``precision`` given, not
    from ``nnx.dot_product_attention``: without dropout, that one hands the work to
    ``jax.nn.dot_product_attention`` and drops ``precision`` on the way (flax 0.12.8), so its
    float32 products would run at the default precision, which GPUs may take as TF32
    (layers.py). Flax masks with the dtype's lowest value, not -inf: the same softmax, since
    the diagonal is never masked."""

    def __init__(self, width: int, heads: int, causal: bool, dtype: jnp.dtype, rngs: nnx.Rngs):
        self.qkv = dense(width, 3 * width, dtype, rngs)
        self.proj = dense(width, width, dtype, rngs)
        self.heads, self.causal = heads, causal

    def __call__(self, x: jax.Array) -> jax.Array:
        batch, tokens, width = x.shape
        qkv = self.qkv(x).reshape(batch, tokens, 3, self.heads, width // self.heads)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]  # each (B, T, heads, d)
        weights = dot_product_attention_weights(q, k, is_causal=self.causal,
                                                precision=PRECISION)
        out = jnp.einsum("bhqk,bkhd->bqhd", weights, v, precision=PRECISION)
        return self.proj(out.reshape(batch, tokens, width))


class FeedForward(nnx.Module):
    def __init__(self, width: int, hidden: int, dtype: jnp.dtype, rngs: nnx.Rngs):
        self.fc1, self.fc2 = dense(width, hidden, dtype, rngs), dense(hidden, width, dtype, rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.fc2(gelu(self.fc1(x)))


class Block(nnx.Module):
    """Pre-norm residual attention, then pre-norm residual MLP."""

    def __init__(self, spec: ViTSpec | GPTSpec, causal: bool, dtype: jnp.dtype, rngs: nnx.Rngs):
        self.norm1 = layer_norm(spec.width, spec.norm_eps, dtype, rngs)
        self.attn = SelfAttention(spec.width, spec.heads, causal, dtype, rngs)
        self.norm2 = layer_norm(spec.width, spec.norm_eps, dtype, rngs)
        self.mlp = FeedForward(spec.width, spec.mlp_width, dtype, rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(nnx.Module):
    def __init__(self, spec: ViTSpec, dtype: jnp.dtype, rngs: nnx.Rngs):
        width, self.dtype = spec.width, dtype
        # patch embedding: kernel = stride = patch, no padding, with bias
        self.patch = conv(spec.input_shape[0], width, spec.patch, spec.patch, 0, True, dtype,
                          rngs)
        self.class_token = nnx.Param(jnp.zeros((1, 1, width), jnp.float32))
        self.position_embedding = nnx.Param(jnp.zeros((1, spec.tokens, width), jnp.float32))
        self.blocks = nnx.List([Block(spec, False, dtype, rngs) for _ in range(spec.depth)])
        self.norm = layer_norm(width, spec.norm_eps, dtype, rngs)
        self.head = dense(width, spec.num_classes, dtype, rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        """Logits of the NCHW batch ``x``."""
        patches = self.patch(x.transpose(0, 2, 3, 1))  # (B, H/p, W/p, width)
        batch, width = patches.shape[0], patches.shape[-1]
        # row-major over (H/p, W/p): token i * W/p + j is patch row i, column j, as the spec says
        tokens = patches.reshape(batch, -1, width)
        # the float32 tables in the layers' dtype, or the sum would promote back to float32
        cls = jnp.broadcast_to(self.class_token[...].astype(self.dtype), (batch, 1, width))
        x = jnp.concatenate([cls, tokens], axis=1) + \
            self.position_embedding[...].astype(self.dtype)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)[:, 0])  # the class token's row
