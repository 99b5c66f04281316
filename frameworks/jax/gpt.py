"""The spec's causal language model (parbench.spec.GPTSpec) as a pure JAX function over the
canonical weights.

Nothing is converted: the blocks are the ViT's (vit.block, causal here), dense kernels are
[out, in] (layers.dense), and both embeddings are the canonical [rows, width] tables, looked up
by index. The output projection is tied: the logits are the final LayerNorm's output times
``token_embedding`` transposed, the same array the lookup reads, so ``jax.grad`` returns one
gradient for it, the sum of both uses' (the lookup's scatter-add and the projection's matmul).
No BatchNorm and dropout 0: the forward is the same in training and inference mode.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from parbench.contract.spec import GPTSpec

from . import vit
from .layers import PRECISION, Params


def embed(params: Params, ids: jax.Array) -> jax.Array:
    """[rows, T] token ids -> [rows, T, width]: each id's row of the token embedding plus the
    position embedding's first T rows (T may be shorter than the context)."""
    # jnp.take, not indexing: an id past the vocabulary gives a NaN row (take's "fill" mode)
    # where indexing would clamp it to the last row silently (torch raises; a jit cannot)
    tokens = jnp.take(params["token_embedding"], ids, axis=0)
    return tokens + params["position_embedding"][:ids.shape[1]]


def apply(spec: GPTSpec, params: Params, ids: jax.Array) -> jax.Array:
    """[rows, T] token ids -> [rows, T, vocab] logits of the next token at every position."""
    x = embed(params, ids)
    for i in range(spec.depth):
        x = vit.block(x, params, f"blocks.{i}", spec, causal=True)
    x = vit.layer_norm(x, params, "norm", spec)
    # tied output projection, no bias: [rows, T, width] @ [width, vocab]
    return jnp.matmul(x, params["token_embedding"].T, precision=PRECISION)
