"""The layers the ResNet and the detector's backbone share (parbench.contract.spec conventions):
the spec's BatchNorm in Paddle (``BatchNorm``, and ``SyncBatchNorm`` for --sync-bn), the
convolution with its norm, the residual block. Apart from model.py so the detector
(centernet.py) can build on them while model.py builds the detector, without an import cycle.
"""

from __future__ import annotations

import paddle
import paddle.nn.functional as F
from paddle import nn

from parbench.contract.spec import (
    Backbone,
    BatchNormSpec,
    BlockLayout,
    block_convs,
    resnet_blocks,
)


class BatchNorm(nn.BatchNorm2D):
    """Paddle's BatchNorm2D in the spec's (torch) convention.

    Paddle's momentum weighs the old running value (``1 - `` the spec's), and its kernel
    updates the running variance with the *biased* batch variance; the spec wants the unbiased
    one. The kernel still normalises (with the biased variance, as the spec says), but on
    copies of the running statistics: it updates what it is given in place, and its backward
    refuses tensors changed again after the forward pass. The layer's own statistics are then
    set by the spec's rule, derived from the kernel's update.
    """

    def __init__(self, channels: int, spec: BatchNormSpec):
        super().__init__(channels, momentum=1.0 - spec.momentum, epsilon=spec.eps)
        self.spec_momentum = spec.momentum

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        if not self.training:
            return super().forward(x)
        running_mean, running_var = self._mean.clone(), self._variance.clone()
        out = F.batch_norm(x, running_mean, running_var, self.weight, self.bias, training=True,
                           momentum=self._momentum, epsilon=self._epsilon)
        with paddle.no_grad():
            paddle.assign(running_mean, self._mean)  # the kernel's update is the spec's here
            # recomputing the variance from x instead cost 29% of a step (measured with
            # --profile: subtract, sum and mean over every activation, 67 of 229 ms)
            paddle.assign(_unbiased(running_var, self._variance, _count(x), self.spec_momentum),
                          self._variance)
        return out


class SyncBatchNorm(nn.SyncBatchNorm):
    """``BatchNorm`` over the global batch: ``nn.SyncBatchNorm`` (GPU only: its kernel
    all-reduces each channel's sum and sum of squares over the process group) in the spec's
    convention.

    Its kernel, too, updates the running variance with the *biased* variance, of the global
    batch (``KeSyncAndMovingStats`` in Paddle's ``sync_batch_norm_utils.h``), so the variance is
    re-derived as in ``BatchNorm``, with the global count: every replica holds as many rows.
    Unlike ``batch_norm_grad``, ``sync_batch_norm_grad`` reads no running statistic (only the
    saved batch mean and inverse deviation), so the kernel may update the layer's own statistics
    in place and the variance is corrected after it.
    """

    def __init__(self, bn: BatchNorm, replicas: int):
        super().__init__(bn._num_features, momentum=bn._momentum, epsilon=bn._epsilon)
        # the same tensors, not copies: the optimizer and export_weights see one parameter
        self.weight, self.bias = bn.weight, bn.bias
        self._mean, self._variance = bn._mean, bn._variance
        self.spec_momentum, self.replicas = bn.spec_momentum, replicas

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        if not self.training:
            return super().forward(x)
        old_var = self._variance.clone()
        out = super().forward(x)
        with paddle.no_grad():
            paddle.assign(_unbiased(self._variance, old_var, _count(x) * self.replicas,
                                    self.spec_momentum), self._variance)
        return out


def _count(x: paddle.Tensor) -> int:
    """Values per channel that one BatchNorm call normalises over (N * H * W)."""
    return x.shape[0] * x.shape[2] * x.shape[3]


def _unbiased(kernel_var: paddle.Tensor, old_var: paddle.Tensor, count: int,
              momentum: float) -> paddle.Tensor:
    """The spec's running variance from the kernel's update of it.

    The kernel left (1 - m) * old + m * biased. The spec's update, (1 - m) * old + m * c * biased
    with c = count / (count - 1), follows from it per channel without touching the activations.
    """
    c = count / (count - 1)
    return c * kernel_var - (c - 1) * (1.0 - momentum) * old_var


class ConvNorm(nn.Layer):
    """conv (bias only without norm) followed by the spec's BatchNorm, if any."""

    def __init__(self, c_in: int, c_out: int, kernel: int, stride: int, spec: Backbone):
        super().__init__()
        self.conv = nn.Conv2D(c_in, c_out, kernel, stride, padding=kernel // 2,
                              bias_attr=None if spec.norm is None else False)
        self.bn = None if spec.norm is None else BatchNorm(c_out, spec.norm)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        x = self.conv(x)
        return x if self.bn is None else self.bn(x)


class Stem(ConvNorm):
    """The stem: ``relu(norm(conv(x)))``, then the spec's max-pool where it has one (Paddle's,
    like torch's, pads with -inf; the ReLU's output is never negative either way)."""

    def __init__(self, spec: Backbone):
        super().__init__(spec.input_shape[0], spec.stem_channels, spec.stem_kernel,
                         spec.stem_stride, spec)
        self.pool = nn.MaxPool2D(3, 2, padding=1) if spec.stem_pool else None

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        x = F.relu(super().forward(x))
        return x if self.pool is None else self.pool(x)


class Block(nn.Layer):
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

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        out = x
        for i, name in enumerate(self.path):
            out = getattr(self, name)(out if i == 0 else F.relu(out))
        return F.relu(out + (x if self.shortcut is None else self.shortcut(x)))


def stem_and_blocks(spec: Backbone) -> tuple[Stem, nn.Sequential]:
    """The ResNet's and the detector's feature extractor: the stem and the residual blocks of
    parbench.contract.spec.resnet_blocks, under the names the canonical weights use."""
    return Stem(spec), nn.Sequential(*(Block(layout, spec) for layout in resnet_blocks(spec)))
