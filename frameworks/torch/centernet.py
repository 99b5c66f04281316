"""The CenterNet-style detector in torch (parbench.contract.spec, CenterNetSpec): the ResNet's
stem and blocks, then a head per output map, concatenated."""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import nn

from parbench.contract.spec import CenterNetSpec

from .layers import ConvNorm, stem_and_blocks


class Head(nn.Module):
    """``out(relu(hidden(features)))``: a 3x3 convolution, then a 1x1 one to the maps."""

    def __init__(self, c_in: int, maps: int, spec: CenterNetSpec):
        super().__init__()
        plain = replace(spec, norm=None)  # the heads' convolutions have biases and no norm
        self.hidden = ConvNorm(c_in, spec.head_channels, 3, 1, plain)
        self.out = ConvNorm(spec.head_channels, maps, 1, 1, plain)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.hidden(x)))


class CenterNet(nn.Module):
    def __init__(self, spec: CenterNetSpec):
        super().__init__()
        self.stem, self.blocks = stem_and_blocks(spec)
        self.heads = nn.ModuleDict({name: Head(spec.stage_channels[-1], maps, spec)
                                    for name, maps in spec.heads})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = self.blocks(self.stem(x))
        return torch.cat([head(features) for head in self.heads.values()], dim=1)
