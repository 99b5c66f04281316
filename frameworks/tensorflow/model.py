"""Builds the spec's model as a Keras 3 model (TensorFlow backend) and moves canonical weights
in and out. The ResNet and the MLP are here, with the convolution layers (ConvNorm, Block) the
ResNet shares with the detector; the vision transformer is in vit.py, the causal language model
in gpt.py, the CenterNet-style detector in centernet.py, all five on layers.py's
RecordingModel; ``BUILDERS`` picks one by ``spec.kind``.

Layouts differ from the canonical ones and are converted on load and export: conv kernels are
HWIO here (OIHW canonical), dense kernels [in, out] (canonical [out, in]). The ResNet takes the
canonical NCHW batch and transposes it to NHWC, the only layout TF's CPU convolutions accept
(the detector too, and it transposes its maps back to NCHW at the output).
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
    MLPSpec,
    ModelSpec,
    ResNetSpec,
    Role,
    kind_of,
    parameters,
)

from .centernet import CenterNet
from .gpt import GPT
from .layers import RecordingModel, TorchBatchNorm, stem_and_blocks
from .tfkeras import keras, tf
from .vit import ViT


def _dense_variables(layer: keras.layers.Dense, prefix: str) -> dict:
    return {f"{prefix}.weight": layer.kernel, f"{prefix}.bias": layer.bias}


class ResNet(RecordingModel):
    def __init__(self, spec: ResNetSpec, sync_bn: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.stem, self.block_names, self.blocks = stem_and_blocks(spec, sync_bn)
        self.head = keras.layers.Dense(spec.num_classes)

    def call(self, x: tf.Tensor, training: bool = False) -> tf.Tensor:
        x = tf.transpose(x, [0, 2, 3, 1])  # NCHW data -> NHWC, what TF's CPU convs take
        x = self._record(self.stem(x, training=training), training)
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
            "gpt": lambda spec, sync_bn: GPT(spec),
            "centernet": lambda spec, sync_bn: CenterNet(spec, sync_bn)}
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
