"""The Keras building blocks every model of this package shares (model.py's ResNet and MLP,
vit.py's ViT): RecordingModel, the base that records what a training step really computed in.
"""

from __future__ import annotations

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
