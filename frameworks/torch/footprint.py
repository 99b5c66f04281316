"""The training state a torch process holds and the bytes its collectives carry
(parbench.run.footprint), counted from live tensors and from the collectives torch dispatches.

torch.distributed's collectives are dispatcher operators (``c10d.allreduce_``,
``c10d._allgather_base_``, ...) whether Python issues them (FSDP2's all-gathers and
reduce-scatters, clip_grad_norm_'s all-reduce of a DTensor norm) or C++ does (DDP's bucketed
gradient all-reduce), so a TorchDispatchMode around a step sees each with its tensors. Not
seen: a collective a DTensor issues inside its own dispatch, below the mode (the scalar
all-reduce of clip_grad_norm_'s total norm under FSDP: 4 bytes).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import torch
from torch import nn
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from parbench.run.footprint import Communication, StateBytes

# c10d operator -> (collective, the argument holding the whole tensors: an all-gather's
# outputs, a reduce-scatter's inputs, an all-reduce's or a broadcast's buffers)
C10D_COLLECTIVES = {
    "allreduce_": ("all-reduce", 0), "allreduce_coalesced_": ("all-reduce", 0),
    "_allgather_base_": ("all-gather", 0), "allgather_": ("all-gather", 0),
    "allgather_into_tensor_coalesced_": ("all-gather", 0),
    "_reduce_scatter_base_": ("reduce-scatter", 1), "reduce_scatter_": ("reduce-scatter", 1),
    "reduce_scatter_tensor_coalesced_": ("reduce-scatter", 1),
    "broadcast_": ("broadcast", 0),
}
METHOD = "counted: the c10d collectives torch dispatched during the first training step"


def local_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes these tensors occupy on this process: a DTensor's local shard only."""
    return sum((t.to_local() if isinstance(t, DTensor) else t).nbytes for t in tensors)


def state_bytes(module: nn.Module, optimizer: torch.optim.Optimizer) -> StateBytes:
    params = list(module.parameters())
    moments = [value for state in optimizer.state.values() for value in state.values()
               if isinstance(value, torch.Tensor)]
    return StateBytes(parameters=local_bytes(params),
                      gradients=local_bytes(p.grad for p in params if p.grad is not None),
                      optimizer=local_bytes(moments))


class CollectiveBytes(TorchDispatchMode):
    """Counts the bytes of every c10d collective dispatched while it is entered."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        collective = C10D_COLLECTIVES.get(func.overloadpacket.__name__)
        if func.namespace == "c10d" and collective:
            kind, position = collective
            tensors = [t for t in tree_leaves(args[position]) if isinstance(t, torch.Tensor)]
            self.bytes[kind] += sum(t.nbytes for t in tensors)
        return func(*args, **(kwargs or {}))

    def result(self) -> Communication:
        return Communication(method=METHOD, bytes=dict(self.bytes))
