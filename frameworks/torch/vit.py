"""The spec's vision transformer (parbench.spec.ViTSpec) as a torch.nn.Module, and the
transformer block it shares with the GPT (gpt.py), causal there.

Module names equal the canonical tensor names (``patch.weight``, ``blocks.0.attn.qkv.weight``,
...) and torch's layouts are the canonical ones, so the weights load with a plain
``load_state_dict``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from parbench.contract.spec import GPTSpec, ViTSpec


def layer_norm(spec: ViTSpec | GPTSpec) -> nn.LayerNorm:
    # torch's default eps is 1e-5; the spec's is 1e-6 (biased variance in both)
    return nn.LayerNorm(spec.width, eps=spec.norm_eps)


# --- attention: one fused qkv projection, torch's in_proj_weight layout
class Attention(nn.Module):
    """Multi-head self-attention with the canonical fused projection: ``qkv`` is a Linear
    ``[3 * width, width]`` whose output rows are q | k | v, each split head-major into
    ``heads`` blocks of ``width / heads`` -- exactly ``nn.MultiheadAttention``'s
    ``in_proj_weight`` / ``in_proj_bias``, with ``proj`` its ``out_proj``. ``causal``: each
    position attends to itself and the positions before it only."""

    def __init__(self, spec: ViTSpec | GPTSpec, causal: bool = False):
        super().__init__()
        self.heads, self.causal = spec.heads, causal
        self.qkv = nn.Linear(spec.width, 3 * spec.width)
        self.proj = nn.Linear(spec.width, spec.width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, width = x.shape
        # (B, T, 3W) -> (3, B, heads, T, d): q, k, v, then head-major within each
        qkv = self.qkv(x).view(batch, tokens, 3, self.heads, width // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        # softmax(q k^T / sqrt(d)) v: SDPA's default scale is 1 / sqrt(d), dropout 0;
        # is_causal masks the scores above the diagonal with -inf (no mask tensor to build)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.proj(out.transpose(1, 2).reshape(batch, tokens, width))


class MLP(nn.Module):
    def __init__(self, spec: ViTSpec | GPTSpec):
        super().__init__()
        self.fc1 = nn.Linear(spec.width, spec.mlp_width)
        self.fc2 = nn.Linear(spec.mlp_width, spec.width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # approximate="none" (torch's default) is the exact erf GELU the spec asks for
        return self.fc2(F.gelu(self.fc1(x), approximate="none"))


# --- block: pre-norm residual attention, then pre-norm residual MLP
class Block(nn.Module):
    def __init__(self, spec: ViTSpec | GPTSpec, causal: bool = False):
        super().__init__()
        self.norm1 = layer_norm(spec)
        self.attn = Attention(spec, causal)
        self.norm2 = layer_norm(spec)
        self.mlp = MLP(spec)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    def __init__(self, spec: ViTSpec):
        super().__init__()
        channels, width = spec.input_shape[0], spec.width
        self.patch = nn.Conv2d(channels, width, spec.patch, stride=spec.patch)  # no padding
        # zeros here; build_model loads the canonical (normal 0.02) values
        self.class_token = nn.Parameter(torch.zeros(1, 1, width))
        self.position_embedding = nn.Parameter(torch.zeros(1, spec.tokens, width))
        self.blocks = nn.Sequential(*(Block(spec) for _ in range(spec.depth)))
        self.norm = layer_norm(spec)
        self.head = nn.Linear(width, spec.num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # (B, W, H/p, W/p) -> (B, tokens, W): flatten(2) is row-major, the spec's token order
        tokens = self.patch(x).flatten(2).transpose(1, 2)
        cls = self.class_token.expand(tokens.shape[0], -1, -1)
        x = torch.cat([cls, tokens], dim=1) + self.position_embedding
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])  # the class token's row
