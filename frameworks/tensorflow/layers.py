"""The Keras building blocks the models of this package share: RecordingModel, the base that
records what a training step really computed in (every model's), and the convolution layers of
the ResNet (model.py) and the detector's backbone (centernet.py): TorchBatchNorm, ConvNorm and
the residual Block.
"""

from __future__ import annotations

from parbench.contract.spec import (
    Backbone,
    BatchNormSpec,
    BlockLayout,
    block_convs,
    resnet_blocks,
)

from .runtime import SUM
from .tfkeras import keras, tf


class RecordingModel(keras.Model):
    """A model that notes, while its first training forward is traced, the dtype of its first
    layer's output: what the run really computed in, whatever policy was asked for."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.first_output_dtype: str | None = None

    def _record(self, first_output: tf.Tensor, training: bool) -> tf.Tensor:
        if training and self.first_output_dtype is None:
            self.first_output_dtype = first_output.dtype.name
        return first_output

    def batchnorms(self) -> list[keras.layers.Layer]:
        """Its BatchNorm layers (model.TorchBatchNorm), whose ``reduced_over`` tells the record
        whether --sync-bn took effect; none unless a model has some."""
        return []



class TorchBatchNorm(keras.layers.Layer):
    """BatchNorm in the spec's convention: ``running = (1 - m) * running + m * batch``,
    normalised with the biased batch variance, running variance fed the unbiased one.

    ``synchronized``: the batch statistics are those of the global batch, reduced over the
    replicas with the replica context's all-reduce (SyncBatchNorm); the all-reduce's gradient
    is an all-reduce too, so the backward pass is that of the global batch as well."""

    def __init__(self, spec: BatchNormSpec, synchronized: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.momentum, self.eps, self.synchronized = spec.momentum, spec.eps, synchronized
        self.reduced_over: int | None = None  # replicas a traced training call reduced over

    def build(self, input_shape) -> None:
        shape = (input_shape[-1],)
        # autocast=False: float32 under a mixed policy too, like Keras' BatchNormalization
        self.gamma = self.add_weight(shape=shape, initializer="ones", name="gamma",
                                     autocast=False)
        self.beta = self.add_weight(shape=shape, initializer="zeros", name="beta",
                                    autocast=False)
        # Without synchronization replicas normalise with their own shard's statistics (like
        # torch DDP); only_first_replica then keeps replica 0's running statistics, which is
        # what DDP's buffer broadcast from rank 0 keeps as well.
        self.moving_mean = self.add_weight(shape=shape, initializer="zeros", trainable=False,
                                           aggregation="only_first_replica", name="moving_mean",
                                           autocast=False)
        self.moving_var = self.add_weight(shape=shape, initializer="ones", trainable=False,
                                          aggregation="only_first_replica", name="moving_var",
                                          autocast=False)

    def call(self, x: tf.Tensor, training: bool = False) -> tf.Tensor:
        # Statistics in float32 whatever the policy: bf16/fp16 sums over a batch lose digits
        computed = tf.cast(x, tf.float32)
        if not training:
            out = tf.nn.batch_normalization(computed, self.moving_mean, self.moving_var,
                                            self.beta, self.gamma, self.eps)
            return tf.cast(out, x.dtype)
        mean, var, count = self._global_moments(computed) if self.synchronized \
            else self._local_moments(computed)
        m = self.momentum
        self.moving_mean.assign((1 - m) * self.moving_mean + m * mean)
        self.moving_var.assign((1 - m) * self.moving_var + m * var * count / (count - 1))
        out = tf.nn.batch_normalization(computed, mean, var, self.beta, self.gamma, self.eps)
        return tf.cast(out, x.dtype)

    @staticmethod
    def _local_moments(x: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        mean, var = tf.nn.moments(x, axes=[0, 1, 2])
        return mean, var, tf.cast(tf.size(x) // tf.shape(x)[-1], tf.float32)

    def _global_moments(self, x: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """Mean and biased variance over every replica's rows, two-pass like tf.nn.moments
        (a sum of squares minus the squared mean cancels digits), and the global row count."""
        context = tf.distribute.get_replica_context()
        self.reduced_over = context.num_replicas_in_sync
        axes = [0, 1, 2]
        local_count = tf.cast(tf.size(x) // tf.shape(x)[-1], tf.float32)
        total, count = context.all_reduce(SUM, [tf.reduce_sum(x, axes), local_count])
        mean = total / count
        squares = context.all_reduce(SUM, tf.reduce_sum(tf.square(x - mean), axes))
        return mean, squares / count, count


class ConvNorm(keras.layers.Layer):
    """Symmetric zero padding, conv (bias only without norm), then the spec's BatchNorm."""

    def __init__(self, c_out: int, kernel: int, stride: int, spec: Backbone,
                 sync_bn: bool, **kwargs):
        super().__init__(**kwargs)
        self.pad = keras.layers.ZeroPadding2D(kernel // 2, data_format="channels_last")
        self.conv = keras.layers.Conv2D(c_out, kernel, stride, padding="valid",
                                        data_format="channels_last",
                                        use_bias=spec.norm is None)
        self.bn = None if spec.norm is None else TorchBatchNorm(spec.norm, sync_bn)

    def call(self, x: tf.Tensor, training: bool = False) -> tf.Tensor:
        x = self.conv(self.pad(x))
        return x if self.bn is None else self.bn(x, training=training)

    def batchnorms(self) -> list[TorchBatchNorm]:
        return [] if self.bn is None else [self.bn]

    def canonical_variables(self, prefix: str) -> dict:
        named = {f"{prefix}.conv.weight": self.conv.kernel}
        if self.bn is None:
            return {**named, f"{prefix}.conv.bias": self.conv.bias}
        return {**named, f"{prefix}.bn.weight": self.bn.gamma, f"{prefix}.bn.bias": self.bn.beta,
                f"{prefix}.bn.running_mean": self.bn.moving_mean,
                f"{prefix}.bn.running_var": self.bn.moving_var}


class Stem(ConvNorm):
    """The stem: ``relu(norm(conv(x)))``, then the spec's max-pool where it has one. Keras'
    ``padding="same"`` pools other windows than torch's (0 before and 1 after on an even size,
    where torch pads 1 on both sides), so the pool pads 1 zero on every side and reads the
    valid windows: its input is a ReLU's, never negative, so a 0 pads as torch's -inf."""

    def __init__(self, spec: Backbone, sync_bn: bool, **kwargs):
        super().__init__(spec.stem_channels, spec.stem_kernel, spec.stem_stride, spec, sync_bn,
                         **kwargs)
        self.pool = keras.Sequential([
            keras.layers.ZeroPadding2D(1, data_format="channels_last"),
            keras.layers.MaxPool2D(3, 2, padding="valid", data_format="channels_last"),
        ]) if spec.stem_pool else None

    def call(self, x: tf.Tensor, training: bool = False) -> tf.Tensor:
        x = tf.nn.relu(super().call(x, training=training))
        return x if self.pool is None else self.pool(x)


class Block(keras.layers.Layer):
    """A residual block (basic or bottleneck, parbench.contract.spec.block_convs): its
    convolutions in order with a ReLU between, plus the shortcut, then a ReLU."""

    def __init__(self, layout: BlockLayout, spec: Backbone, sync_bn: bool, **kwargs):
        super().__init__(**kwargs)
        self.convs = {name: ConvNorm(c_out, kernel, stride, spec, sync_bn)
                      for name, _c_in, c_out, kernel, stride in block_convs(layout)}
        self.main = [self.convs[name] for name in self.convs if name != "shortcut"]
        self.shortcut = self.convs.get("shortcut")

    def call(self, x: tf.Tensor, training: bool = False) -> tf.Tensor:
        out = x
        for i, conv in enumerate(self.main):
            out = conv(out if i == 0 else tf.nn.relu(out), training=training)
        skip = x if self.shortcut is None else self.shortcut(x, training=training)
        return tf.nn.relu(out + skip)

    def batchnorms(self) -> list[TorchBatchNorm]:
        return [bn for conv in self.convs.values() for bn in conv.batchnorms()]

    def canonical_variables(self, prefix: str) -> dict:
        return {key: variable for name, conv in self.convs.items()
                for key, variable in conv.canonical_variables(f"{prefix}.{name}").items()}


def stem_and_blocks(spec: Backbone, sync_bn: bool) -> tuple[Stem, list[str], list[Block]]:
    """The ResNet's and the detector's feature extractor: the stem, the canonical names of the
    residual blocks of parbench.contract.spec.resnet_blocks, and the blocks."""
    layout = resnet_blocks(spec)
    blocks = [Block(block, spec, sync_bn) for block in layout]
    return Stem(spec, sync_bn), [block.name for block in layout], blocks
