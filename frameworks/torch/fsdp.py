"""torch-fsdp: fully sharded data parallelism with FSDP2 (``fully_shard``), one process per
device.

Every parameter becomes a DTensor sharded along its first dimension over the processes, so each
rank holds 1/N of the parameters, of their gradients and of the optimizer state (whose tensors
are shaped like the parameters they belong to). Each block of the model and then the root are
one ``fully_shard`` unit: before a unit's forward its parameters are all-gathered, after its
backward its gradients are reduce-scattered (each rank receives the mean of its shard) and the
gathered parameters freed. ``--reshard-after-forward yes`` (FSDP2's default for blocks) also
frees them after the forward and gathers them again for the backward (ZeRO-3: two all-gathers
per step); ``no`` keeps them from forward to backward (ZeRO-2-like: one all-gather, more memory).

The process group, data shard and launchers are process_group.py's, shared with torch-ddp.
On CPU the mesh is gloo's and must be passed explicitly: without one, fully_shard builds a mesh
on the accelerator when CUDA is present (pytorch/pytorch#132471). gloo has no reduce-scatter of
its own, so on CPU torch carries it out through an all-reduce; the counts here are what FSDP
asks for, what NCCL would carry.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

import torch
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor

from parbench.run.job import Job
from parbench.run.modes import Observed

from .model import sharding_units
from .process_group import ProcessGroupStrategy, launch

LOW_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def mixed_precision(precision: str, root: bool) -> MixedPrecisionPolicy:
    """FSDP's own mixed precision: parameters gathered in the low dtype for forward and
    backward, gradients reduced in float32, and the root's output (only the root's: a block's
    output is the next block's input) cast back to float32 for the loss. fp16's loss scaling is
    runtime.Step's GradScaler, which unscales the sharded gradients like whole ones."""
    low = LOW_DTYPES.get(precision)
    if low is None:
        return MixedPrecisionPolicy()
    return MixedPrecisionPolicy(param_dtype=low, reduce_dtype=torch.float32,
                                output_dtype=torch.float32 if root else None)


class FullyShardedStrategy(ProcessGroupStrategy):
    # --- setup: threads and seed, then one process group, one device per process
    # (ProcessGroupStrategy), and a 1-D mesh over the processes for the shards
    def setup_devices(self, job: Job) -> list[torch.device]:
        devices = super().setup_devices(job)
        self.mesh = init_device_mesh(devices[0].type, (job.world_size,))
        return devices

    # --- model: every rank loads the same canonical weights and keeps its shard of each
    # tensor: each block, then the root (the embeddings, the stem, the head, and a tied output
    # projection, which therefore stays one parameter), is one fully_shard unit. --precision
    # bf16 is FSDP's mixed-precision policy (the step enters no autocast); --compile compiles
    # the sharded module (its hooks run eagerly, between the compiled graphs)
    def wrap(self, module: nn.Module) -> nn.Module:
        reshard, precision = self.modes.reshard_after_forward == "yes", self.modes.precision
        units = sharding_units(module)
        for unit in units:
            fully_shard(unit, mesh=self.mesh, reshard_after_forward=reshard,
                        mp_policy=mixed_precision(precision, root=False))
        fully_shard(module, mesh=self.mesh, reshard_after_forward=reshard,
                    mp_policy=mixed_precision(precision, root=True))
        self.resharded: bool | None = None  # seen after the first training forward
        (units[0] if units else module).register_forward_hook(self._see_reshard)
        return torch.compile(module) if self.modes.compile else module

    @property
    def autocast_precision(self) -> str:
        return "fp32"  # the mixed-precision policy casts instead

    def _see_reshard(self, unit: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        """After FSDP's own post-forward hook: a unit that resharded holds DTensor shards
        again, one that did not holds its gathered (plain) parameters."""
        if unit.training and self.resharded is None:
            self.resharded = isinstance(next(unit.parameters()), DTensor)

    # --- data shard: this rank's contiguous part of each global batch (ProcessGroupStrategy)

    # --- step: FSDP all-gathers and reduce-scatters inside forward and backward; with
    # --grad-accum the micro-batches before the last keep unsharded gradients locally (no
    # reduce-scatter) and the last one reduces their sum; --clip-grad-norm takes the norm of
    # the sharded gradients (an all-reduce of the squared shards' sums) and scales every shard
    def hold_gradients(self) -> AbstractContextManager:
        return _no_gradient_sync(self.module)

    def observed(self) -> Observed:
        seen = super().observed()
        seen.resharded_after_forward = self.resharded
        return seen

    # --- eval: each rank scores its part of the test set; every forward gathers parameters,
    # so every rank evaluates the same number of chunks (ProcessGroupStrategy)

    # --- export: TorchStrategy's export_weights gathers each sharded tensor whole (a
    # collective: every rank calls it, rank 0 writes the file)

    # --- teardown: the process group is left, or aborted by a failed rank (ProcessGroupStrategy)


@contextmanager
def _no_gradient_sync(module: FSDPModule) -> Iterator[None]:
    module.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        module.set_requires_gradient_sync(True)


def main(job: Job) -> None:
    launch(job, FullyShardedStrategy)
