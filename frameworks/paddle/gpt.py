"""The spec's causal language model (parbench.spec.GPTSpec) as a paddle.nn.Layer.

Parameter names equal the canonical ones (``token_embedding``, ``blocks.0.attn.qkv.weight``,
...), so model.py loads and exports it like the other models: the blocks' Linear kernels are
transposed there ([in, out] in Paddle), and both embeddings are plain parameters, [vocab,
width] and [context, width] in Paddle as in the canonical layout (not ``nn.Embedding``, whose
tensor would be named ``token_embedding.weight``). The output projection is tied: the logits
are the final LayerNorm's output times the token embedding transposed, one parameter used by
the lookup and by the matmul, so backward sums both uses' gradients into it.
"""

from __future__ import annotations

import paddle
import paddle.nn.functional as F
from paddle import nn

from parbench.contract.spec import GPTSpec

from .vit import Block, layer_norm


class GPT(nn.Layer):
    def __init__(self, spec: GPTSpec):
        super().__init__()
        # load_weights overwrites both; the zeros only give the parameters their shapes
        zeros = nn.initializer.Constant(0.0)
        self.token_embedding = self.create_parameter([spec.vocab, spec.width],
                                                     default_initializer=zeros)
        self.position_embedding = self.create_parameter([spec.context, spec.width],
                                                        default_initializer=zeros)
        # the first Linear registered is blocks.0.attn.qkv: model.first_layer's dtype probe
        self.blocks = nn.LayerList([Block(spec, causal=True) for _ in range(spec.depth)])
        self.norm = layer_norm(spec)

    def forward(self, ids: paddle.Tensor) -> paddle.Tensor:
        """[rows, T] int64 token ids -> [rows, T, vocab] logits, T at most the context."""
        # T is a number under to_static too: it traces one program per input shape
        x = F.embedding(ids, self.token_embedding) + self.position_embedding[:ids.shape[1]]
        for block in self.blocks:
            x = block(x)
        # tied output projection, no bias: [rows, T, width] x [vocab, width]^T
        return paddle.matmul(self.norm(x), self.token_embedding, transpose_y=True)
