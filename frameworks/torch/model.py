"""Builds the spec's model as a torch.nn.Module and moves canonical weights in and out.

torch's own layouts are the canonical ones (conv OIHW, Linear [out, in]) and its module names
are chosen to equal the canonical names, so loading is a plain ``load_state_dict``.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise

import numpy as np
import torch
from torch import nn
from torch.distributed.tensor import DTensor

from parbench.contract.spec import MLPSpec, ModelSpec, ResNetSpec, kind_of

from .centernet import CenterNet
from .gpt import GPT
from .layers import stem_and_blocks
from .vit import ViT


class ResNet(nn.Module):
    def __init__(self, spec: ResNetSpec):
        super().__init__()
        self.stem, self.blocks = stem_and_blocks(spec)
        self.head = nn.Linear(spec.stage_channels[-1], spec.num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        return self.head(x.mean(dim=(2, 3)))


class MLP(nn.Module):
    def __init__(self, spec: MLPSpec):
        super().__init__()
        widths = [int(np.prod(spec.input_shape)), *spec.hidden]
        self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in pairwise(widths))
        self.head = nn.Linear(widths[-1], spec.num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.flatten(1)
        for layer in self.hidden:
            x = torch.relu(layer(x))
        return self.head(x)


# One builder per model kind (parbench.spec.KINDS); a kind missing here is an error.
BUILDERS: dict[str, Callable[[ModelSpec], nn.Module]] = {"resnet": ResNet, "mlp": MLP,
                                                        "vit": ViT, "gpt": GPT,
                                                        "centernet": CenterNet}


def build_model(spec: ModelSpec, weights: dict[str, np.ndarray]) -> nn.Module:
    """The spec's model holding the canonical ``weights``."""
    kind_of(spec)  # an unknown kind: ValueError naming the known ones
    if spec.kind not in BUILDERS:
        raise ValueError(f"torch has no builder for model kind {spec.kind!r}")
    model = BUILDERS[spec.kind](spec)
    state = {name: torch.from_numpy(np.array(array)) for name, array in weights.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    # num_batches_tracked is torch bookkeeping, not part of the spec
    missing = [name for name in missing if not name.endswith("num_batches_tracked")]
    if missing or unexpected:
        raise ValueError(f"canonical weights do not fit the torch model: missing {missing}, "
                         f"unexpected {unexpected}")
    return model


def first_layer(model: nn.Module) -> nn.Module:
    """The layer whose output dtype shows the precision a run computes in: the stem conv of the
    resnet and the detector, the patch conv of the ViT, the first Linear of the MLP (its head
    when it has no hidden layer), the first block's qkv projection of the GPT (an embedding
    lookup is not autocast: it returns its table's dtype)."""
    if isinstance(model, ResNet | CenterNet):
        return model.stem.conv
    if isinstance(model, ViT):
        return model.patch
    if isinstance(model, MLP):
        return model.hidden[0] if len(model.hidden) else model.head
    if isinstance(model, GPT):
        return model.blocks[0].attn.qkv
    raise TypeError(f"no first layer known for {type(model).__name__}")


def sharding_units(model: nn.Module) -> list[nn.Module]:
    """The layers sharded data parallelism gathers one at a time, before the rest of the model
    (the root's unit): the residual blocks of the resnet and the detector, the transformer
    blocks of the ViT and the GPT, the hidden layers of the MLP (none when it has only its
    head)."""
    if isinstance(model, MLP):
        return list(model.hidden)
    if isinstance(model, ResNet | ViT | GPT | CenterNet):
        return list(model.blocks)
    raise TypeError(f"no sharding units known for {type(model).__name__}")


def export_weights(model: nn.Module) -> dict[str, np.ndarray]:
    """The canonical weights; a sharded parameter (an FSDP DTensor) whole, gathered from every
    rank's shard: a collective, so under FSDP every rank must export."""
    return {name: _whole(tensor).detach().cpu().numpy().copy()
            for name, tensor in model.state_dict().items()
            if not name.endswith("num_batches_tracked")}


def _whole(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor
