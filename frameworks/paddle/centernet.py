"""The CenterNet-style detector in Paddle (parbench.contract.spec, CenterNetSpec): the ResNet's
stem and blocks, then a head per output map, concatenated.

Layer names equal the canonical ones (``heads.heat.hidden.conv.weight``), so model.py loads and
exports it like the ResNet: every tensor is a convolution's (OIHW in Paddle as in the canonical
layout) or a BatchNorm's, none is transposed.
"""

from __future__ import annotations

from dataclasses import replace

import paddle
import paddle.nn.functional as F
from paddle import nn

from parbench.contract.spec import CenterNetSpec

from .layers import ConvNorm, stem_and_blocks


class Head(nn.Layer):
    """``out(relu(hidden(features)))``: a 3x3 convolution, then a 1x1 one to the maps."""

    def __init__(self, c_in: int, maps: int, spec: CenterNetSpec):
        super().__init__()
        plain = replace(spec, norm=None)  # the heads' convolutions have biases and no norm
        self.hidden = ConvNorm(c_in, spec.head_channels, 3, 1, plain)
        self.out = ConvNorm(spec.head_channels, maps, 1, 1, plain)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return self.out(F.relu(self.hidden(x)))


class CenterNet(nn.Layer):
    def __init__(self, spec: CenterNetSpec):
        super().__init__()
        # registered first: model.first_layer (the dtype probe) finds the stem convolution
        self.stem, self.blocks = stem_and_blocks(spec)
        # LayerDict keeps the insertion order: the heads' maps concatenate in spec.heads' order
        self.heads = nn.LayerDict({name: Head(spec.stage_channels[-1], maps, spec)
                                   for name, maps in spec.heads})

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        features = self.blocks(self.stem(x))
        return paddle.concat([head(features) for head in self.heads.values()], axis=1)
