"""The run modes (parbench.run.modes) in Paddle, shared by every Paddle strategy.

* ``--precision bf16|fp16``: ``paddle.amp.auto_cast`` (O1: white-listed ops such as conv and
  matmul in the low precision, the rest float32) around forward and loss; fp16 also scales the
  loss (``paddle.amp.GradScaler``). GPU only: on CPU auto_cast changes nothing (config refuses).
* ``--compile``: ``paddle.jit.to_static(full_graph=True)`` on the model's forward, before
  DataParallel wraps it (the other order fails). Full graph, not the default SOT translator:
  the whole forward becomes one static program or the run fails, and the programs it built are
  counted in its program cache; SOT falls back to eager around what it cannot translate.
* ``--sync-bn``: the spec's BatchNorm becomes a SyncBatchNorm (model.SyncBatchNorm). GPU only.
* ``--grad-accum K``, the precision's autocast and ``--clip-grad-norm`` are in the step
  (runtime.TrainStep).
"""

from __future__ import annotations

import paddle
from paddle import nn
from paddle.jit.dy2static.program_translator import ASTStaticFunction

from parbench.run.modes import Modes, Observed

from .model import convert_sync_batchnorm, first_layer, has_batchnorm

# to_static with either oneDNN flag on segfaults in the first compiled step (measured, Paddle
# 3.3.1 CPU); in dygraph they have no effect, so a compiled run turns them off.
ONEDNN_FLAGS = ("FLAGS_use_mkldnn", "FLAGS_use_onednn")


def dtype_name(dtype: paddle.dtype) -> str:
    """numpy-style name: 'float32', 'bfloat16', 'float16' (eager tensors and static values).
    Not paddle.base.data_feeder.convert_dtype, which calls bfloat16 'uint16'."""
    return str(dtype).removeprefix("paddle.")


class FirstLayerDtype:
    """Records the dtype of the first layer's output in the first training forward. Under
    to_static that forward is the trace, and the hook sees the program's value."""

    UNSEEN = "not observed"  # before the first training forward

    def __init__(self, model: nn.Layer):
        self.name = self.UNSEEN
        first_layer(model).register_forward_post_hook(self._record)

    def _record(self, layer: nn.Layer, inputs: tuple, output: paddle.Tensor) -> None:
        if layer.training and self.name == self.UNSEEN:
            self.name = dtype_name(output.dtype)


class ModelModes:
    """The model-side modes, applied in place to the bare model before DataParallel and the
    optimizer see it: SyncBatchNorm, the dtype hook, then to_static (it traces what runs)."""

    def __init__(self, module: nn.Layer, modes: Modes, replicas: int):
        self.sync_bn_layers = convert_sync_batchnorm(module, replicas) if modes.sync_bn else 0
        self.first_dtype = FirstLayerDtype(module)
        self.notes: list[str] = []
        if modes.sync_bn:
            self.notes.append(f"--sync-bn: {self.sync_bn_layers} BatchNorm layers synchronized "
                              f"across {replicas} processes (nn.SyncBatchNorm, running_var in "
                              "the spec's convention)")
        if modes.grad_accum > 1 and has_batchnorm(module):
            self.notes.append(f"--grad-accum {modes.grad_accum}: BatchNorm normalises each "
                              "micro-batch by its own statistics and updates its running "
                              "statistics once per micro-batch, as that many devices would")
        self.static = _to_static(module, self.notes) if modes.compile else None

    def observed(self, micro_batches: int, clipped_steps: int | None) -> Observed:
        graphs = None if self.static is None else self.static.get_traced_count()
        return Observed(self.first_dtype.name, graphs, self.sync_bn_layers, micro_batches,
                        clipped_steps)


def _to_static(module: nn.Layer, notes: list[str]) -> ASTStaticFunction:
    """Make ``module.forward`` a full-graph StaticFunction; returns it (its program cache
    holds one program per traced input signature and train/eval mode)."""
    on = [flag for flag, value in paddle.get_flags(list(ONEDNN_FLAGS)).items() if value]
    if on:
        paddle.set_flags({flag: False for flag in on})
        notes.append(f"--compile turned off {', '.join(on)}: to_static segfaults with either")
    paddle.jit.to_static(module, full_graph=True)
    # the backend to_static resolved: CINN where the build and a GPU have it, else PHI kernels;
    # Paddle keeps it only in the StaticFunction's private kwargs
    backend = module.forward._kwargs["backend"].name
    notes.append(f"--compile: paddle.jit.to_static(full_graph=True), backend {backend}; the "
                 "forward and its backward run as static programs, the optimizer eagerly")
    return module.forward
