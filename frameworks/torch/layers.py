"""The convolution layers the ResNet and the detector's backbone share (parbench.contract.spec
conventions)."""

from __future__ import annotations

import torch
from torch import nn

from parbench.contract.spec import Backbone, BlockLayout, block_convs, resnet_blocks


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


class Stem(ConvNorm):
    """The stem: ``relu(norm(conv(x)))``, then the spec's max-pool where it has one."""

    def __init__(self, spec: Backbone):
        super().__init__(spec.input_shape[0], spec.stem_channels, spec.stem_kernel,
                         spec.stem_stride, spec)
        self.pool = nn.MaxPool2d(3, 2, padding=1) if spec.stem_pool else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(super().forward(x))
        return x if self.pool is None else self.pool(x)


class Block(nn.Module):
    """A residual block (basic or bottleneck, parbench.contract.spec.block_convs): its
    convolutions in order with a ReLU between, plus the shortcut, then a ReLU."""

    def __init__(self, layout: BlockLayout, spec: Backbone):
        super().__init__()
        convs = block_convs(layout)
        self.path = [name for name, *_ in convs if name != "shortcut"]
        for name, c_in, c_out, kernel, stride in convs:
            setattr(self, name, ConvNorm(c_in, c_out, kernel, stride, spec))
        if not layout.projection:
            self.shortcut = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x
        for i, name in enumerate(self.path):
            out = getattr(self, name)(out if i == 0 else torch.relu(out))
        return torch.relu(out + (x if self.shortcut is None else self.shortcut(x)))


def stem_and_blocks(spec: Backbone) -> tuple[Stem, nn.Sequential]:
    """The ResNet's and the detector's feature extractor: the stem and the residual blocks of
    parbench.contract.spec.resnet_blocks, under the names the canonical weights use."""
    return Stem(spec), nn.Sequential(*(Block(layout, spec) for layout in resnet_blocks(spec)))
