"""What a data-parallel strategy keeps and moves, framework-free: the bytes of training state
one device holds after the first step, and the bytes its collectives carry per step.

Replicated data parallelism (DDP, MirroredStrategy, pmap) keeps a whole copy of the parameters,
their gradients and the optimizer state on every device and all-reduces every gradient; sharded
data parallelism (FSDP, ZeRO) keeps 1/N of each and gathers parameters when a layer needs them.
These two records are what that trade is measured by. Each framework counts them from its own
live tensors and arrays (never from a formula); ``Communication.method`` says where its figures
come from.
"""

from __future__ import annotations

from dataclasses import dataclass

# The collectives a step's figures are split by. Each is counted by the size of the whole
# (unsharded) tensor it combines, per device: an all-gather by its output, a reduce-scatter by
# its input, an all-reduce by its buffer, an all-to-all (pieces exchanged between devices) by
# what it returns. On a ring each device then sends about (N-1)/N of that
# size for an all-gather or a reduce-scatter and twice that for an all-reduce.
COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "broadcast")


@dataclass
class StateBytes:
    """Bytes of training state one device holds after the first optimizer step, counted from
    the live tensors: its share of each parameter, of each gradient kept between the backward
    and the update (0 where the gradients live only inside a compiled step), and of the
    optimizer's state (momentum, Adam moments, step counters)."""

    parameters: int
    gradients: int
    optimizer: int

    @property
    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer


@dataclass
class Communication:
    """Bytes per device that one training step's collectives carry, by collective (see
    COLLECTIVES), and how they were counted: ``method`` names the framework hook or compiled
    program they were read from; ``bytes`` is None, with the reason in ``method``, where
    they could not be counted."""

    method: str
    bytes: dict[str, int] | None

    def __post_init__(self) -> None:
        unknown = set(self.bytes or {}) - set(COLLECTIVES)
        if unknown:
            raise ValueError(f"unknown collective(s) {sorted(unknown)}; known: {COLLECTIVES}")
