"""The CenterNet-style detector (parbench.contract.spec, CenterNetSpec) as a Flax NNX module: the
ResNet's stem and blocks (layers.py, shared with model.ResNet), then a head per output map,
concatenated.

Activations are NHWC inside, as every Flax model here; the maps go back to NCHW at the output,
the contract's layout, so the task's loss (tasks.ObjectDetection) reads the channels where
torch's does and the host decodes what every framework returns alike.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from parbench.contract.spec import CenterNetSpec

from .layers import ConvNorm, stem_and_blocks


class Head(nnx.Module):
    """``out(relu(hidden(features)))``: a 3x3 convolution, then a 1x1 one to the maps."""

    def __init__(self, c_in: int, maps: int, spec: CenterNetSpec, dtype: jnp.dtype,
                 rngs: nnx.Rngs):
        # the heads' convolutions have biases and no norm (norm None), named as torch's
        # ConvNorm: heads.<name>.hidden.conv.weight
        self.hidden = ConvNorm(c_in, spec.head_channels, 3, 1, None, dtype, rngs)
        self.out = ConvNorm(spec.head_channels, maps, 1, 1, None, dtype, rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.out(nnx.relu(self.hidden(x)))


class CenterNet(nnx.Module):
    def __init__(self, spec: CenterNetSpec, dtype: jnp.dtype, rngs: nnx.Rngs):
        self.stem, self.blocks = stem_and_blocks(spec, dtype, rngs)
        self.heads = nnx.Dict({name: Head(spec.stage_channels[-1], maps, spec, dtype, rngs)
                               for name, maps in spec.heads})
        # the concatenation's order, the spec's, kept apart: a state's keys come back sorted
        self.order = tuple(name for name, _ in spec.heads)

    def __call__(self, x: jax.Array) -> jax.Array:
        """The NCHW batch ``x`` -> [rows, classes + 4, H/4, W/4] maps (NCHW, as the spec)."""
        features = self.stem(x.transpose(0, 2, 3, 1))
        for block in self.blocks:
            features = block(features)
        maps = jnp.concatenate([self.heads[name](features) for name in self.order], axis=-1)
        return maps.transpose(0, 3, 1, 2)
