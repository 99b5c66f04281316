"""The spec's causal language model (parbench.spec.GPTSpec) as a torch.nn.Module.

Parameter names equal the canonical ones (``token_embedding``, ``blocks.0.attn.qkv.weight``,
...), so the weights load with a plain ``load_state_dict``. The output projection is tied: the
logits are the final LayerNorm's output times the token embedding transposed, one Parameter
used twice, so autograd sums both uses' gradients into it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from parbench.contract.spec import GPTSpec

from .vit import Block, layer_norm


class GPT(nn.Module):
    def __init__(self, spec: GPTSpec):
        super().__init__()
        # zeros here; build_model loads the canonical (normal 0.02) values
        self.token_embedding = nn.Parameter(torch.zeros(spec.vocab, spec.width))
        self.position_embedding = nn.Parameter(torch.zeros(spec.context, spec.width))
        self.blocks = nn.Sequential(*(Block(spec, causal=True) for _ in range(spec.depth)))
        self.norm = layer_norm(spec)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """[rows, T] token ids -> [rows, T, vocab] logits, T at most the context."""
        x = F.embedding(ids, self.token_embedding) + self.position_embedding[:ids.shape[1]]
        x = self.norm(self.blocks(x))
        return x @ self.token_embedding.t()  # tied output projection, no bias
