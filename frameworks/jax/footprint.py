"""The training state each JAX device holds and the bytes a compiled step's collectives carry
(parbench.run.footprint).

State is counted from the live arrays: each device's own shards of the parameters and of the
optimizer state. The gradients are not state here: they live only inside the compiled step,
which consumes them in the update before it returns. Collectives are read off the step's
compiled program (XLA's optimized HLO): each collective instruction once, by the size of its
result, which for a 1-D mesh of N devices is the whole tensor for an all-gather and an
all-reduce, and 1/N of it for a reduce-scatter (counted N times).
"""

from __future__ import annotations

import re
from collections import Counter

import jax
import numpy as np

from parbench.run.footprint import Communication, StateBytes

from .training import TrainState

METHOD = "counted: the collectives of the step's compiled XLA program (optimized HLO)"
NOT_COUNTED_ACCUMULATING = ("not counted with --grad-accum: the micro-batches run in a loop "
                            "of the compiled program, whose collectives the program text shows "
                            "once")
DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "bf16": 2, "f16": 2, "s16": 2, "u16": 2,
               "f32": 4, "s32": 4, "u32": 4, "f64": 8, "s64": 8, "u64": 8}
# "%all-gather.1 = f32[64,10]{0,1} all-gather(" or "= (f32[64]{0}, f32[]) all-reduce("
# (an asynchronous collective counts by its -done, whose result is the collective's)
INSTRUCTION = re.compile(r"= (?P<shape>\(.*?\)|\S+) (?P<op>all-gather|all-reduce|"
                         r"reduce-scatter|all-to-all|collective-permute)(?:-done)?\(")
ARRAY = re.compile(r"(?P<dtype>[a-z]+\d*)\[(?P<dims>[\d,]*)\]")
KINDS = {"collective-permute": "all-to-all"}  # both move pieces between devices


def device_bytes(tree, device: jax.Device) -> int:
    """Bytes of ``tree``'s arrays that live on ``device`` (its shards)."""
    return sum(shard.data.nbytes for leaf in jax.tree.leaves(tree)
               for shard in leaf.addressable_shards if shard.device == device)


def state_bytes(state: TrainState, devices: list[jax.Device]) -> list[StateBytes]:
    return [StateBytes(parameters=device_bytes(state.params, device), gradients=0,
                       optimizer=device_bytes(state.opt_state, device)) for device in devices]


def shape_bytes(shape: str) -> int:
    """Bytes of an HLO result shape, an array or a tuple of arrays."""
    return sum(DTYPE_BYTES[m["dtype"]] * int(np.prod([int(d) for d in m["dims"].split(",") if d]))
               for m in ARRAY.finditer(shape))


def collectives(hlo: str, mesh_size: int) -> Communication:
    """Per-device bytes of each collective in a compiled program's text."""
    moved: Counter[str] = Counter()
    for match in INSTRUCTION.finditer(hlo):
        op = match["op"]
        size = shape_bytes(match["shape"])
        moved[KINDS.get(op, op)] += size * (mesh_size if op == "reduce-scatter" else 1)
    return Communication(method=METHOD, bytes=dict(moved))
