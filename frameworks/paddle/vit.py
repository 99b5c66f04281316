"""The spec's vision transformer (parbench.spec.ViTSpec) as a paddle.nn.Layer, and the
transformer block it shares with the GPT (gpt.py), causal there.

Layer and parameter names equal the canonical names, so model.py loads and exports it like the
other models: the patch convolution is OIHW in Paddle as in the canonical layout, and the
Linear kernels ([in, out] in Paddle) are transposed there. Two Paddle defaults differ from the
spec and are set here: ``nn.LayerNorm``'s epsilon is 1e-5 (the spec wants 1e-6), and
``F.gelu`` is exact by default (``approximate=False``), which is the spec's, passed explicitly.
"""

from __future__ import annotations

import paddle
import paddle.nn.functional as F
from paddle import nn

from parbench.contract.spec import GPTSpec, ViTSpec


def layer_norm(spec: ViTSpec | GPTSpec) -> nn.LayerNorm:
    """LayerNorm over the width with the spec's epsilon (Paddle's default is 1e-5: the GPT's,
    passed all the same)."""
    return nn.LayerNorm(spec.width, epsilon=spec.norm_eps)


class Attention(nn.Layer):
    """Multi-head self-attention with the canonical fused ``qkv`` projection.

    ``qkv`` maps the width to 3 * width outputs: q, then k, then v, each ``heads`` consecutive
    blocks of ``width / heads`` (head-major), which is the canonical [3 * width, width] kernel
    transposed into Paddle's [in, out] Linear. Not ``nn.MultiHeadAttention``: it keeps three
    Linears ``q_proj`` / ``k_proj`` / ``v_proj`` ([width, width] each, [in, out]), so its q, k
    and v kernels are the canonical kernel's three row blocks, each transposed. ``causal``: each
    position attends to itself and the positions before it only (``causal_mask``).
    """

    def __init__(self, spec: ViTSpec | GPTSpec, causal: bool = False):
        super().__init__()
        self.heads, self.head_width, self.width = spec.heads, spec.width // spec.heads, spec.width
        self.causal = causal
        self.qkv = nn.Linear(spec.width, 3 * spec.width)
        self.proj = nn.Linear(spec.width, spec.width)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        # [B, T, 3W] -> [B, T, 3, heads, d] -> [3, B, heads, T, d]: the output's layout above
        # (0 in a shape keeps that dimension: to_static may not know the batch size)
        qkv = self.qkv(x).reshape([0, 0, 3, self.heads, self.head_width])
        q, k, v = qkv.transpose([2, 0, 3, 1, 4]).unbind(0)
        scores = paddle.matmul(q, k, transpose_y=True) * self.head_width ** -0.5
        if self.causal:
            scores = causal_mask(scores)
        out = paddle.matmul(F.softmax(scores, axis=-1), v)  # [B, heads, T, d]
        # the heads' outputs concatenated in head order: [B, T, heads * d]
        return self.proj(out.transpose([0, 2, 1, 3]).reshape([0, 0, self.width]))


def causal_mask(scores: paddle.Tensor) -> paddle.Tensor:
    """``scores`` [..., T, T] with every key after its query at -inf, so softmax gives it
    weight 0: query i attends to keys 0..i (the spec's masking, exactly: adding 0 leaves the
    other scores' bits as they are).

    An explicit mask, not ``F.scaled_dot_product_attention(is_causal=True)``: Paddle's takes
    [B, T, heads, d] and picks its kernel by device and dtype (read from Paddle 3.3.1's
    nn/functional/sdpa.py): flash or memory-efficient attention on a GPU, on the CPU a "math"
    fallback that scales q before the product and masks with -1e4, not -inf. Masking the
    ViT's own softmax keeps one computation on every device. The mask takes the scores' dtype
    (bfloat16 under AMP, on a GPU): a float32 one would make Paddle promote the sum, with a
    warning at every call (softmax, on AMP's black list, runs in float32 either way).
    """
    tokens = scores.shape[-1]  # a number under to_static too: it traces one program per shape
    mask = paddle.triu(paddle.full([tokens, tokens], float("-inf")), diagonal=1)
    return scores + mask.astype(scores.dtype)


class MLP(nn.Layer):
    def __init__(self, spec: ViTSpec | GPTSpec):
        super().__init__()
        self.fc1 = nn.Linear(spec.width, spec.mlp_width)
        self.fc2 = nn.Linear(spec.mlp_width, spec.width)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return self.fc2(F.gelu(self.fc1(x), approximate=False))  # exact: the erf form


class Block(nn.Layer):
    """Pre-norm transformer block (dropout 0: none at all)."""

    def __init__(self, spec: ViTSpec | GPTSpec, causal: bool = False):
        super().__init__()
        self.norm1, self.attn = layer_norm(spec), Attention(spec, causal)
        self.norm2, self.mlp = layer_norm(spec), MLP(spec)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Layer):
    def __init__(self, spec: ViTSpec):
        super().__init__()
        channels = spec.input_shape[0]
        # registered first: model.first_layer (the dtype probe) finds the patch convolution
        self.patch = nn.Conv2D(channels, spec.width, spec.patch, stride=spec.patch)
        # load_weights overwrites both; the zeros only give the parameters their shapes
        zeros = nn.initializer.Constant(0.0)
        self.class_token = self.create_parameter([1, 1, spec.width], default_initializer=zeros)
        self.position_embedding = self.create_parameter([1, spec.tokens, spec.width],
                                                        default_initializer=zeros)
        self.blocks = nn.LayerList([Block(spec) for _ in range(spec.depth)])
        self.norm = layer_norm(spec)
        self.head = nn.Linear(spec.width, spec.num_classes)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        # [B, W, H/p, W/p] -> [B, patches, W]: token i * (W/p) + j is patch row i, column j
        x = self.patch(x).flatten(2).transpose([0, 2, 1])
        token = self.class_token.expand_as(x[:, :1])  # one class token per image
        x = paddle.concat([token, x], axis=1) + self.position_embedding
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)[:, 0])  # the class token's row
