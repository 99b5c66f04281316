"""The convolution layers the ResNet and the detector's backbone share (parbench.contract.spec
conventions)."""

from __future__ import annotations

import torch
from torch import nn

from parbench.contract.spec import CenterNetSpec, ResNetSpec, resnet_blocks

Backbone = ResNetSpec | CenterNetSpec  # the specs whose convolutions these are


class ConvNorm(nn.Module):
    """conv (bias only without norm) followed by the spec's BatchNorm, if any."""

    def __init__(self, c_in: int, c_out: int, kernel: int, stride: int, spec: Backbone):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, kernel, stride, padding=kernel // 2,
                              bias=spec.norm is None)
        self.bn = None if spec.norm is None else nn.BatchNorm2d(
            c_out, eps=spec.norm.eps, momentum=spec.norm.momentum)  # same convention as spec

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        return x if self.bn is None else self.bn(x)


class Block(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int, projection: bool, spec: Backbone):
        super().__init__()
        self.conv1 = ConvNorm(c_in, c_out, 3, stride, spec)
        self.conv2 = ConvNorm(c_out, c_out, 3, 1, spec)
        self.shortcut = ConvNorm(c_in, c_out, 1, stride, spec) if projection else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv2(torch.relu(self.conv1(x)))
        return torch.relu(out + (x if self.shortcut is None else self.shortcut(x)))


def stem_and_blocks(spec: Backbone) -> tuple[ConvNorm, nn.Sequential]:
    """The ResNet's and the detector's feature extractor: the stem convolution and the residual
    blocks of parbench.contract.spec.resnet_blocks, under the names the canonical weights use."""
    stem = ConvNorm(spec.input_shape[0], spec.stem_channels, 3, 1, spec)
    blocks = nn.Sequential(*(Block(c_in, c_out, stride, proj, spec)
                             for _, c_in, c_out, stride, proj in resnet_blocks(spec)))
    return stem, blocks
