"""Builds the spec's model as a Keras 3 model (TensorFlow backend) and moves canonical weights
in and out. The ResNet and the MLP are here, the vision transformer in vit.py, the causal
language model in gpt.py, all four on layers.py's RecordingModel; ``BUILDERS`` picks one by
``spec.kind``.

Layouts differ from the canonical ones and are converted on load and export: conv kernels are
HWIO here (OIHW canonical), dense kernels [in, out] (canonical [out, in]). The ResNet takes the
canonical NCHW batch and transposes it to NHWC, the only layout TF's CPU convolutions accept.
Padding is explicit and symmetric (``ZeroPadding2D`` + ``valid``), because TF's ``same`` pads
stride-2 convolutions on one side only. BatchNorm is a small layer of its own: Keras'
``BatchNormalization`` updates its moving variance with the biased batch variance and calls
``1 - momentum`` its momentum, while the spec follows torch.

Under a mixed-precision policy (``--precision bf16|fp16``) convolutions and dense layers compute
in the policy's dtype; BatchNorm computes its statistics in float32 and keeps float32 variables
(what Keras' own BatchNormalization does), and the logits leave the model in float32, so the
loss and softmax are float32. The models record, while a training step is traced, the dtype
the first layer really produced (``first_output_dtype``): the run's evidence for --precision.
"""

from __future__ import annotations

import numpy as np

from parbench.contract.spec import (
    BatchNormSpec,
    MLPSpec,
    ModelSpec,
    ResNetSpec,
    Role,
    kind_of,
    parameters,
    resnet_blocks,
)

from .gpt import GPT
from .layers import RecordingModel
from .runtime import SUM
from .tfkeras import keras, tf
from .vit import ViT


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

    def __init__(self, c_out: int, kernel: int, stride: int, spec: ResNetSpec,
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


class Block(keras.layers.Layer):
    def __init__(self, c_out: int, stride: int, projection: bool, spec: ResNetSpec,
                 sync_bn: bool, **kwargs):
        super().__init__(**kwargs)
        self.conv1 = ConvNorm(c_out, 3, stride, spec, sync_bn)
        self.conv2 = ConvNorm(c_out, 3, 1, spec, sync_bn)
        self.shortcut = ConvNorm(c_out, 1, stride, spec, sync_bn) if projection else None

    def call(self, x: tf.Tensor, training: bool = False) -> tf.Tensor:
        out = self.conv2(tf.nn.relu(self.conv1(x, training=training)), training=training)
        skip = x if self.shortcut is None else self.shortcut(x, training=training)
        return tf.nn.relu(out + skip)

    def batchnorms(self) -> list[TorchBatchNorm]:
        convs = [self.conv1, self.conv2] + ([self.shortcut] if self.shortcut else [])
        return [bn for conv in convs for bn in conv.batchnorms()]

    def canonical_variables(self, prefix: str) -> dict:
        named = {**self.conv1.canonical_variables(f"{prefix}.conv1"),
                 **self.conv2.canonical_variables(f"{prefix}.conv2")}
        if self.shortcut is not None:
            named.update(self.shortcut.canonical_variables(f"{prefix}.shortcut"))
        return named


def _dense_variables(layer: keras.layers.Dense, prefix: str) -> dict:
    return {f"{prefix}.weight": layer.kernel, f"{prefix}.bias": layer.bias}


class ResNet(RecordingModel):
    def __init__(self, spec: ResNetSpec, sync_bn: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.stem = ConvNorm(spec.stem_channels, 3, 1, spec, sync_bn)
        self.block_names = [name for name, *_ in resnet_blocks(spec)]
        self.blocks = [Block(c_out, stride, projection, spec, sync_bn)
                       for _, _, c_out, stride, projection in resnet_blocks(spec)]
        self.head = keras.layers.Dense(spec.num_classes)

    def call(self, x: tf.Tensor, training: bool = False) -> tf.Tensor:
        x = tf.transpose(x, [0, 2, 3, 1])  # NCHW data -> NHWC, what TF's CPU convs take
        x = tf.nn.relu(self._record(self.stem(x, training=training), training))
        for block in self.blocks:
            x = block(x, training=training)
        # float32 logits under a mixed policy: the loss and softmax in float32
        return tf.cast(self.head(tf.reduce_mean(x, axis=[1, 2])), tf.float32)

    def batchnorms(self) -> list[TorchBatchNorm]:
        return self.stem.batchnorms() + [bn for block in self.blocks for bn in block.batchnorms()]

    def canonical_variables(self) -> dict:
        named = self.stem.canonical_variables("stem")
        for name, block in zip(self.block_names, self.blocks):
            named.update(block.canonical_variables(name))
        return {**named, **_dense_variables(self.head, "head")}


class MLP(RecordingModel):
    def __init__(self, spec: MLPSpec, **kwargs):
        super().__init__(**kwargs)
        self.hidden = [keras.layers.Dense(width) for width in spec.hidden]
        self.head = keras.layers.Dense(spec.num_classes)

    def call(self, x: tf.Tensor, training: bool = False) -> tf.Tensor:
        x = tf.reshape(x, [tf.shape(x)[0], -1])  # flattened in NCHW order, as torch does
        for layer in self.hidden:
            x = tf.nn.relu(self._record(layer(x), training))
        # the head is the first layer only without hidden ones; float32 logits for the loss
        return tf.cast(self._record(self.head(x), training), tf.float32)

    def canonical_variables(self) -> dict:
        named = {}
        for i, layer in enumerate(self.hidden):
            named.update(_dense_variables(layer, f"hidden.{i}"))
        return {**named, **_dense_variables(self.head, "head")}


# Canonical -> TF layout per role; roles not listed (biases, norms, embeddings) are the same
TO_TF = {Role.CONV_WEIGHT: (2, 3, 1, 0),  # OIHW -> HWIO
         Role.DENSE_WEIGHT: (1, 0)}  # [out, in] -> [in, out]
TO_CANONICAL = {Role.CONV_WEIGHT: (3, 2, 0, 1), Role.DENSE_WEIGHT: (1, 0)}


def to_tf_layout(array: np.ndarray, role: Role | str) -> np.ndarray:
    axes = TO_TF.get(Role(role))  # Role(): a plain "conv" finds its member too
    return array if axes is None else array.transpose(axes)


def to_canonical_layout(array: np.ndarray, role: Role | str) -> np.ndarray:
    axes = TO_CANONICAL.get(Role(role))
    return array if axes is None else array.transpose(axes)


# One builder per model kind (parbench.spec.KINDS); a kind missing here is an error. The ViT
# and the GPT have no BatchNorm: --sync-bn is refused for them before anything starts.
BUILDERS = {"resnet": lambda spec, sync_bn: ResNet(spec, sync_bn),
            "mlp": lambda spec, sync_bn: MLP(spec),
            "vit": lambda spec, sync_bn: ViT(spec),
            "gpt": lambda spec, sync_bn: GPT(spec)}
# What a row of each kind's input is (parbench.contract.tasks: images are float32, a language
# model reads int64 token ids); a kind not listed reads float32
INPUT_DTYPES = {"gpt": np.int64}


def probe_input(spec: ModelSpec) -> np.ndarray:
    """One row of zeros in the model's input dtype: calling the model on it creates its
    variables (token 0 is a valid id)."""
    return np.zeros((1, *spec.input_shape), INPUT_DTYPES.get(spec.kind, np.float32))


def build_model(spec: ModelSpec, weights: dict[str, np.ndarray],
                sync_bn: bool = False) -> RecordingModel:
    """The spec's model holding the canonical ``weights``; call it inside the strategy's scope
    so that its variables are the strategy's (mirrored) variables, and after setting the
    precision policy (layers take the policy in force when they are created). ``sync_bn``:
    BatchNorm statistics over all replicas."""
    kind_of(spec)  # an unknown kind: ValueError naming the known ones
    if spec.kind not in BUILDERS:
        raise ValueError(f"TensorFlow has no builder for model kind {spec.kind!r}")
    model = BUILDERS[spec.kind](spec, sync_bn)
    model(probe_input(spec))  # creates the variables
    named, expected = model.canonical_variables(), parameters(spec)
    if set(named) != set(weights) or set(named) != set(expected):
        raise ValueError(f"canonical weights do not fit the TensorFlow model: model has "
                         f"{sorted(set(named) ^ set(weights))} where the weights differ")
    for name, variable in named.items():
        variable.assign(to_tf_layout(np.asarray(weights[name]), expected[name].role))
    return model


def export_weights(model: keras.Model, spec: ModelSpec) -> dict[str, np.ndarray]:
    roles = {name: param.role for name, param in parameters(spec).items()}
    return {name: to_canonical_layout(np.array(variable.numpy()), roles[name])
            for name, variable in model.canonical_variables().items()}
