"""The spec's causal language model (parbench.spec.GPTSpec) as a Flax NNX module, on the ViT's
blocks (vit.Block, causal here).

The output projection is tied: the logits are the final LayerNorm's output times the token
embedding's table transposed, the same variable the lookup reads, so ``jax.grad`` returns one
gradient for it, the sum of both uses' (the lookup's scatter-add and the projection's matmul).
No BatchNorm and dropout 0: the forward is the same in training and inference mode.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from parbench.contract.spec import GPTSpec

from .layers import PRECISION, layer_norm
from .vit import Block


class GPT(nnx.Module):
    def __init__(self, spec: GPTSpec, dtype: jnp.dtype, rngs: nnx.Rngs):
        self.token_embedding = nnx.Embed(spec.vocab, spec.width, dtype=dtype, rngs=rngs)
        self.position_embedding = nnx.Param(jnp.zeros((spec.context, spec.width), jnp.float32))
        self.blocks = nnx.List([Block(spec, True, dtype, rngs) for _ in range(spec.depth)])
        self.norm = layer_norm(spec.width, spec.norm_eps, dtype, rngs)
        self.dtype = dtype

    def __call__(self, ids: jax.Array) -> jax.Array:
        """[rows, T] token ids -> [rows, T, vocab] logits of the next token at every position
        (T may be shorter than the context). An id past the vocabulary gives a NaN row:
        ``nnx.Embed`` looks up with ``jnp.take``, whose default fills, where indexing would
        clamp it to the last row silently (torch raises; a jit cannot)."""
        x = self.token_embedding(ids) + self.position_embedding[:ids.shape[1]].astype(self.dtype)
        for block in self.blocks:
            x = block(x)
        # tied output projection, no bias; not Embed.attend, which takes no precision
        table = self.token_embedding.embedding[...].astype(self.dtype)
        return jnp.matmul(self.norm(x), table.T, precision=PRECISION)
