"""The spec's causal language model (parbench.spec.GPTSpec) as a Keras 3 model (TensorFlow
backend), on vit.py's transformer blocks with causal attention.

Layouts: both embedding tables keep the canonical [rows, width] layout (no conversion); the
blocks' dense kernels are [in, out] here, converted on load like the ViT's. The output
projection is tied: one ``token_embedding`` variable is gathered from for the input and
multiplied, transposed, into the logits, so the tape sums both uses' gradients into it. The
gather alone would give ``IndexedSlices``, which the shared optimizer rules cannot take; summed
with the matmul's gradient it arrives dense, eagerly and traced (measured, TF 2.21), as torch's
embedding gradient is.

Under a mixed policy the embedding rows are cast to the policy's dtype after the lookup (the
table stays float32, as torch's F.embedding does under autocast), the blocks compute as the
ViT's do, the logits matmul runs in the policy's dtype and the logits leave in float32. The
dtype probe is the first block's qkv projection, as torch's ``first_layer`` says: an embedding
lookup computes nothing and returns its table's dtype.
"""

from __future__ import annotations

from parbench.contract.spec import GPTSpec

from .layers import RecordingModel
from .tfkeras import tf
from .vit import Block, layer_norm


class GPT(RecordingModel):
    def __init__(self, spec: GPTSpec, **kwargs):
        super().__init__(**kwargs)
        # zeros here; build_model loads the canonical (normal 0.02) values. autocast=False: the
        # tables read as float32 under a mixed policy too; call casts what it uses
        self.token_embedding = self.add_weight(shape=(spec.vocab, spec.width), autocast=False,
                                               initializer="zeros", name="token_embedding")
        self.position_embedding = self.add_weight(shape=(spec.context, spec.width),
                                                  autocast=False, initializer="zeros",
                                                  name="position_embedding")
        self.blocks = [Block(spec, causal=True, probe=self._record if i == 0 else None)
                       for i in range(spec.depth)]
        self.norm = layer_norm(spec)

    def call(self, ids: tf.Tensor, training: bool = False) -> tf.Tensor:
        """[rows, T] token ids -> [rows, T, vocab] float32 logits, T at most the context."""
        tokens = tf.shape(ids)[1]
        # float32 tables under every policy: look up, add, then cast the rows
        x = tf.gather(self.token_embedding, ids) + self.position_embedding[:tokens]
        x = tf.cast(x, self.compute_dtype)
        for block in self.blocks:
            x = block(x)
        x = self.norm(x)
        # tied output projection, no bias: [rows, T, width] x [vocab, width]^T
        logits = tf.matmul(x, tf.cast(self.token_embedding, x.dtype), transpose_b=True)
        return tf.cast(logits, tf.float32)  # the loss and softmax in float32

    def canonical_variables(self) -> dict:
        named = {"token_embedding": self.token_embedding,
                 "position_embedding": self.position_embedding}
        for i, block in enumerate(self.blocks):
            named.update(block.canonical_variables(f"blocks.{i}"))
        return {**named, "norm.weight": self.norm.gamma, "norm.bias": self.norm.beta}
