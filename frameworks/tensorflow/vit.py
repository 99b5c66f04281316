"""The spec's vision transformer (parbench.spec.ViTSpec) as a Keras 3 model (TensorFlow backend),
and the transformer block it shares with the GPT (gpt.py), causal there.

Layouts: the patch convolution's kernel is HWIO and dense kernels are [in, out] here (canonical
OIHW and [out, in]); ``model.to_tf_layout`` converts them on load. The canonical batch is NCHW
and is transposed to NHWC, what TF's CPU convolutions take. The fused qkv Dense keeps the
canonical column order (q | k | v, head-major), so its kernel is the canonical one transposed,
nothing more; ``keras_attention_weights`` shows what Keras' own MultiHeadAttention wants instead.

Under a mixed policy the dense layers compute in the policy's dtype; LayerNorm computes in
float32 (Keras' LayerNormalization does so itself), and so does the attention softmax (as torch
autocast does); the logits leave in float32.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from parbench.contract.spec import GPTSpec, ViTSpec

from .layers import RecordingModel
from .tfkeras import keras, tf

# (output, training) -> output: RecordingModel._record, handed to the layer whose output dtype
# shows the run's compute precision when that layer sits inside a block (the GPT's first qkv)
Probe = Callable[[tf.Tensor, bool], tf.Tensor]


def layer_norm(spec: ViTSpec | GPTSpec) -> keras.layers.LayerNormalization:
    # Keras' default epsilon is 1e-3; the spec's is 1e-6 for the ViT, 1e-5 for the GPT (biased
    # variance in all)
    return keras.layers.LayerNormalization(epsilon=spec.norm_eps)


def gelu(x: tf.Tensor) -> tf.Tensor:
    # the exact erf GELU: keras.activations.gelu defaults to approximate=False, but
    # keras.ops.gelu defaults to approximate=True (tanh), so the choice is spelled out
    return keras.activations.gelu(x, approximate=False)


# --- attention: one fused qkv Dense, the canonical (torch in_proj_weight) layout
class Attention(keras.layers.Layer):
    """Multi-head self-attention with one fused ``qkv`` Dense: its 3 * width output columns are
    q | k | v, each ``heads`` consecutive blocks of ``width / heads``; per head
    ``softmax(q k^T / sqrt(d)) v``; the heads, concatenated in order, feed ``proj``.
    ``causal``: each position attends to itself and the positions before it only. ``probe``
    sees the qkv projection's output (see Probe)."""

    def __init__(self, spec: ViTSpec | GPTSpec, causal: bool = False,
                 probe: Probe | None = None, **kwargs):
        super().__init__(**kwargs)
        self.heads, self.head_dim = spec.heads, spec.width // spec.heads
        self.causal, self.probe = causal, probe
        self.qkv = keras.layers.Dense(3 * spec.width)
        self.proj = keras.layers.Dense(spec.width)

    def call(self, x: tf.Tensor, training: bool = False) -> tf.Tensor:
        batch, tokens, width = tf.shape(x)[0], tf.shape(x)[1], x.shape[-1]
        projected = self.qkv(x)
        if self.probe is not None:
            projected = self.probe(projected, training)
        qkv = tf.reshape(projected, [batch, tokens, 3, self.heads, self.head_dim])
        q, k, v = tf.unstack(tf.transpose(qkv, [2, 0, 3, 1, 4]))  # each (B, heads, T, d)
        scores = tf.matmul(q, k, transpose_b=True) / math.sqrt(self.head_dim)
        scores = tf.cast(scores, tf.float32)  # the softmax in float32 under a mixed policy
        if self.causal:
            scores = causal_mask(scores, tokens)
        weights = tf.cast(tf.nn.softmax(scores), v.dtype)
        out = tf.transpose(tf.matmul(weights, v), [0, 2, 1, 3])  # (B, T, heads, d)
        return self.proj(tf.reshape(out, [batch, tokens, width]))


def causal_mask(scores: tf.Tensor, tokens: tf.Tensor) -> tf.Tensor:
    """Scores (..., T, T) with query i's keys j > i set to -inf, as torch's ``is_causal``: their
    softmax weight is exactly 0, and every row keeps its diagonal, so none is all -inf (NaN)."""
    positions = tf.range(tokens)
    allowed = positions[:, None] >= positions[None, :]  # (T queries, T keys), lower triangle
    return tf.where(allowed, scores, tf.constant(-math.inf, scores.dtype))


def keras_attention_weights(qkv_weight: np.ndarray, qkv_bias: np.ndarray, proj_weight: np.ndarray,
                            proj_bias: np.ndarray, heads: int) -> list[np.ndarray]:
    """Canonical fused-qkv tensors -> ``keras.layers.MultiHeadAttention(heads, width // heads)``
    weights, in its order: query, key, value kernels [width, heads, d] and biases [heads, d],
    then the output kernel [heads, d, width] and bias [width]. Keras keeps q, k and v as three
    EinsumDense layers with the heads as a kernel axis; the canonical layout stacks them."""
    width = proj_weight.shape[0]
    d = width // heads
    tensors = []
    for part in range(3):  # q, k, v: consecutive row blocks of the fused [3W, W] kernel
        rows = slice(part * width, (part + 1) * width)
        tensors += [qkv_weight[rows].T.reshape(width, heads, d), qkv_bias[rows].reshape(heads, d)]
    return tensors + [proj_weight.T.reshape(heads, d, width), proj_bias]


class MLP(keras.layers.Layer):
    def __init__(self, spec: ViTSpec | GPTSpec, **kwargs):
        super().__init__(**kwargs)
        self.fc1 = keras.layers.Dense(spec.mlp_width)
        self.fc2 = keras.layers.Dense(spec.width)

    def call(self, x: tf.Tensor) -> tf.Tensor:
        return self.fc2(gelu(self.fc1(x)))


# --- block: pre-norm residual attention, then pre-norm residual MLP
class Block(keras.layers.Layer):
    def __init__(self, spec: ViTSpec | GPTSpec, causal: bool = False,
                 probe: Probe | None = None, **kwargs):
        super().__init__(**kwargs)
        self.norm1, self.attn = layer_norm(spec), Attention(spec, causal, probe)
        self.norm2, self.mlp = layer_norm(spec), MLP(spec)

    def call(self, x: tf.Tensor) -> tf.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))

    def canonical_variables(self, prefix: str) -> dict:
        named = {}
        for name, layer in (("norm1", self.norm1), ("norm2", self.norm2)):
            named[f"{prefix}.{name}.weight"], named[f"{prefix}.{name}.bias"] = \
                layer.gamma, layer.beta
        for name, layer in (("attn.qkv", self.attn.qkv), ("attn.proj", self.attn.proj),
                            ("mlp.fc1", self.mlp.fc1), ("mlp.fc2", self.mlp.fc2)):
            named[f"{prefix}.{name}.weight"], named[f"{prefix}.{name}.bias"] = \
                layer.kernel, layer.bias
        return named


class ViT(RecordingModel):
    def __init__(self, spec: ViTSpec, **kwargs):
        super().__init__(**kwargs)
        self.width = spec.width
        self.patch = keras.layers.Conv2D(spec.width, spec.patch, spec.patch, padding="valid",
                                         data_format="channels_last")
        # zeros here; build_model loads the canonical (normal 0.02) values
        self.class_token = self.add_weight(shape=(1, 1, spec.width), initializer="zeros",
                                           name="class_token")
        self.position_embedding = self.add_weight(shape=(1, spec.tokens, spec.width),
                                                  initializer="zeros", name="position_embedding")
        self.blocks = [Block(spec) for _ in range(spec.depth)]
        self.norm = layer_norm(spec)
        self.head = keras.layers.Dense(spec.num_classes)

    def call(self, x: tf.Tensor, training: bool = False) -> tf.Tensor:
        x = tf.transpose(x, [0, 2, 3, 1])  # NCHW data -> NHWC, what TF's CPU convs take
        patches = self._record(self.patch(x), training)  # (B, H/p, W/p, width)
        batch = tf.shape(patches)[0]
        # row-major over (H/p, W/p): token i * W/p + j is patch row i, column j, as the spec says
        tokens = tf.reshape(patches, [batch, -1, self.width])
        cls = tf.cast(tf.tile(self.class_token, [batch, 1, 1]), tokens.dtype)
        x = tf.concat([cls, tokens], axis=1) + tf.cast(self.position_embedding, tokens.dtype)
        for block in self.blocks:
            x = block(x)
        # the class token's row; float32 logits under a mixed policy: the loss in float32
        return tf.cast(self.head(self.norm(x)[:, 0]), tf.float32)

    def canonical_variables(self) -> dict:
        named = {"patch.weight": self.patch.kernel, "patch.bias": self.patch.bias,
                 "class_token": self.class_token, "position_embedding": self.position_embedding}
        for i, block in enumerate(self.blocks):
            named.update(block.canonical_variables(f"blocks.{i}"))
        return {**named, "norm.weight": self.norm.gamma, "norm.bias": self.norm.beta,
                "head.weight": self.head.kernel, "head.bias": self.head.bias}
