"""The CenterNet-style detector (parbench.contract.spec, CenterNetSpec) as a Keras 3 model
(TensorFlow backend): the ResNet's stem and blocks (model.py's ConvNorm and Block, BatchNorm and
--sync-bn included), then a head per output map, concatenated.

Activations are NHWC inside, as the ResNet's (TF's CPU convolutions take no other layout); the
maps go back to NCHW at the output, the contract's layout, so the task's loss (tasks.py) reads
the channels where torch's does and the host decodes what every framework returns alike. Under
a mixed policy the maps leave in float32: the focal loss and its log-sigmoids in float32.
"""

from __future__ import annotations

from dataclasses import replace

from parbench.contract.spec import CenterNetSpec

from .layers import ConvNorm, RecordingModel, TorchBatchNorm, stem_and_blocks
from .tfkeras import keras, tf


class Head(keras.layers.Layer):
    """``out(relu(hidden(features)))``: a 3x3 convolution, then a 1x1 one to the maps."""

    def __init__(self, maps: int, spec: CenterNetSpec, **kwargs):
        super().__init__(**kwargs)
        plain = replace(spec, norm=None)  # the heads' convolutions have biases and no norm
        self.hidden = ConvNorm(spec.head_channels, 3, 1, plain, sync_bn=False)
        self.out = ConvNorm(maps, 1, 1, plain, sync_bn=False)

    def call(self, x: tf.Tensor) -> tf.Tensor:
        return self.out(tf.nn.relu(self.hidden(x)))

    def canonical_variables(self, prefix: str) -> dict:
        return {**self.hidden.canonical_variables(f"{prefix}.hidden"),
                **self.out.canonical_variables(f"{prefix}.out")}


class CenterNet(RecordingModel):
    def __init__(self, spec: CenterNetSpec, sync_bn: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.stem, self.block_names, self.blocks = stem_and_blocks(spec, sync_bn)
        # a list, not a dict: the maps concatenate in spec.heads' order, whatever Keras' tracking
        # does with a dict's keys
        self.head_names = [name for name, _ in spec.heads]
        self.heads = [Head(maps, spec) for _, maps in spec.heads]

    def call(self, x: tf.Tensor, training: bool = False) -> tf.Tensor:
        """The NCHW batch ``x`` -> [rows, classes + 4, H/4, W/4] float32 maps (NCHW)."""
        x = tf.transpose(x, [0, 2, 3, 1])  # NCHW data -> NHWC, what TF's CPU convs take
        x = self._record(self.stem(x, training=training), training)
        for block in self.blocks:
            x = block(x, training=training)
        maps = tf.concat([head(x) for head in self.heads], axis=-1)
        # NHWC -> the contract's NCHW; float32 under a mixed policy: the loss in float32
        return tf.cast(tf.transpose(maps, [0, 3, 1, 2]), tf.float32)

    def batchnorms(self) -> list[TorchBatchNorm]:
        return self.stem.batchnorms() + [bn for block in self.blocks for bn in block.batchnorms()]

    def canonical_variables(self) -> dict:
        named = self.stem.canonical_variables("stem")
        for name, block in zip(self.block_names, self.blocks):
            named.update(block.canonical_variables(name))
        for name, head in zip(self.head_names, self.heads):
            named.update(head.canonical_variables(f"heads.{name}"))
        return named
