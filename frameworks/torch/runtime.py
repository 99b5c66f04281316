"""What every torch strategy shares: device and threads, the optimizer step in the run's modes
(precision, micro-batches), evaluation, and the facts a record needs (versions, devices, memory
peaks, what the modes did). TorchStrategy, the strategies' base class, is in strategy.py."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import numpy as np
import torch
from torch import nn

from parbench.base.devices import physical_gpu
from parbench.contract.optim import OptimizerSpec
from parbench.contract.spec import ModelSpec, parameters
from parbench.run.job import Job
from parbench.run.modes import Modes, Observed

from .model import first_layer
from .tasks import TaskLoss


def setup_threads(job: Job) -> None:
    """Fix the compute threads (they change both speed and the bits of the result)."""
    torch.manual_seed(job.seed)
    torch.set_num_threads(job.threads)


def sgd(model: nn.Module, spec: OptimizerSpec) -> torch.optim.SGD:
    """torch's SGD is the shared update rule exactly (see parbench.contract.optim)."""
    return torch.optim.SGD(model.parameters(), lr=spec.lr, momentum=spec.momentum,
                           weight_decay=spec.weight_decay)


def adamw(model: nn.Module, spec: OptimizerSpec, model_spec: ModelSpec) -> torch.optim.AdamW:
    """torch's AdamW is the shared rule (parbench.contract.optim is written from it); the decay mask is
    two param groups, split by ``Param.decays`` of each tensor's canonical name (the module's
    parameter names are the canonical names)."""
    decays = {name: param.decays for name, param in parameters(model_spec).items()}
    groups: dict[bool, list[nn.Parameter]] = {True: [], False: []}
    for name, tensor in model.named_parameters():
        groups[decays[name]].append(tensor)  # a name outside the spec: KeyError, not a guess
    return torch.optim.AdamW(
        [{"params": groups[True], "weight_decay": spec.weight_decay},
         {"params": groups[False], "weight_decay": 0.0}],
        lr=spec.lr, betas=(spec.beta1, spec.beta2), eps=spec.eps)


OPTIMIZERS = {"sgd": lambda model, spec, model_spec: sgd(model, spec), "adamw": adamw}


def optimizer(model: nn.Module, spec: OptimizerSpec,
              model_spec: ModelSpec) -> torch.optim.Optimizer:
    """The run's optimizer (--optimizer) over ``model``'s parameters."""
    return OPTIMIZERS[spec.name](model, spec, model_spec)


AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def autocast(device: torch.device, precision: str) -> AbstractContextManager:
    """The run's precision around forward + loss: autocast to bf16/fp16 (matmuls and convs in
    the low dtype, losses and reductions kept in float32); fp32 runs without autocast."""
    dtype = AUTOCAST_DTYPES.get(precision)
    return torch.autocast(device.type, dtype) if dtype else nullcontext()


class AutocastForward(nn.Module):
    """Enters the run's autocast inside forward, for nn.DataParallel to replicate.

    Autocast state (enabled flag and dtype) is thread-local, and DataParallel runs each
    replica's forward in a worker thread: parallel_apply re-enters autocast there with the
    caller's enabled flag but the device's default dtype (float16 on CUDA), so a bf16 autocast
    entered around DataParallel alone computes the replicas in float16. Entering it here, in
    the replicated forward, gives every replica the run's dtype."""

    def __init__(self, module: nn.Module, device: torch.device, precision: str):
        super().__init__()
        self.module, self.device, self.precision = module, device, precision

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with autocast(self.device, self.precision):
            return self.module(x)


class DtypeProbe:
    """The dtype of a layer's output in training forwards, seen by a forward hook. The hook also
    runs in DataParallel's replicas (a replica copies the module's attributes, hook table
    included) and in compiled graphs (Dynamo traces it and replays its attribute write after
    every call: measured, it adds no graph and no recompilation)."""

    def __init__(self, layer: nn.Module):
        self.dtype: torch.dtype | None = None
        layer.register_forward_hook(self._seen)

    def _seen(self, layer: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        if layer.training:  # evaluation forwards do not count
            self.dtype = output.dtype


Rows = np.ndarray | torch.Tensor  # numpy from --input arrays, the DataLoader's from native


def as_tensor(rows: Rows) -> torch.Tensor:
    """numpy rows are wrapped without a copy (from_numpy); a loader's tensors pass unchanged."""
    return rows if isinstance(rows, torch.Tensor) else torch.from_numpy(rows)


class Step:
    """One optimizer step in the run's modes: autocast, fp16 loss scaling and K micro-batches.

    The process's rows are split into K contiguous micro-batches; each loss is divided by K, so
    the summed gradient is the gradient of the mean over all rows. ``no_sync`` (DDP's) wraps the
    forward and backward of the first K-1 micro-batches, so gradients are all-reduced once, in
    the last backward. With fp16, GradScaler scales every micro-batch's loss by the same factor
    and unscales, checks and updates once per optimizer step.

    ``clip`` (--clip-grad-norm) clips once per optimizer step, after every micro-batch's
    backward (so after DDP's all-reduce: the norm of the averaged, global-batch gradient) and
    after GradScaler's unscale (the norm of the true gradient, not the scaled one).
    """

    def __init__(self, model: nn.Module, module: nn.Module, optimizer: torch.optim.Optimizer,
                 device: torch.device, modes: Modes, task_loss: TaskLoss,
                 no_sync: Callable[[], AbstractContextManager] = nullcontext,
                 clip: float | None = None, autocast_precision: str | None = None):
        self.model, self.module, self.optimizer, self.device = model, module, optimizer, device
        # what autocast computes in: the run's precision, or fp32 where the strategy casts
        # otherwise (FSDP's mixed-precision policy)
        self.autocast_precision = autocast_precision or modes.precision
        self.modes, self.task_loss, self.no_sync, self.clip = modes, task_loss, no_sync, clip
        self.scaler = torch.amp.GradScaler(device.type, enabled=modes.precision == "fp16")
        self.probe = DtypeProbe(first_layer(module))
        self.first: tuple[str, int] | None = None  # step 0's (compute dtype, micro-batches)
        # steps whose gradient norm exceeded ``clip``, counted on the device (no host sync per
        # step); None until a step has clipped, so a step path that skips clip_gradients shows
        # in Observed and fails the run
        self.clipped: torch.Tensor | None = None

    def __call__(self, x: Rows, y: Rows, lr: float) -> float:
        for group in self.optimizer.param_groups:
            group["lr"] = lr  # the schedule is computed in common and fed per step
        inputs = as_tensor(x).to(self.device, non_blocking=True)
        labels = as_tensor(y).to(self.device, non_blocking=True)
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        parts = self.modes.grad_accum
        micro = list(zip(inputs.chunk(parts), labels.chunk(parts)))
        total = torch.zeros((), device=self.device)
        for index, (x_part, y_part) in enumerate(micro):
            last = index == len(micro) - 1  # DDP all-reduces only in the last backward
            with nullcontext() if last else self.no_sync():
                with autocast(self.device, self.autocast_precision):
                    loss = self.task_loss.mean_loss(self.model(x_part), y_part) / parts
                self.scaler.scale(loss).backward()
            total += loss.detach()
        self.clip_gradients()
        self.scaler.step(self.optimizer)  # skipped when fp16 gradients overflowed
        self.scaler.update()
        self.record_first(len(micro))
        return total.item()

    def clip_gradients(self) -> None:
        """--clip-grad-norm, once per optimizer step; counts the steps it shrank."""
        if self.clip is None:
            return
        shrunk = clip_global_norm(self.module, self.optimizer, self.scaler, self.clip)
        self.clipped = shrunk if self.clipped is None else self.clipped + shrunk

    def record_first(self, micro_batches: int) -> None:
        """Keep step 0's compute dtype and micro-batch count (the profiler may take step 0)."""
        if self.first is None:
            self.first = (dtype_name(self.probe.dtype), micro_batches)

    def observed(self) -> Observed:
        """What the modes did: valid once the first step ran."""
        compute_dtype, micro_batches = self.first or ("none", 0)
        return Observed(compute_dtype=compute_dtype,
                        compiled_graphs=compiled_graphs() if self.modes.compile else None,
                        sync_bn_layers=sum(isinstance(layer, nn.SyncBatchNorm)
                                           for layer in self.module.modules()),
                        micro_batches=micro_batches,
                        clipped_steps=None if self.clipped is None else int(self.clipped))


def clip_global_norm(module: nn.Module, optimizer: torch.optim.Optimizer,
                     scaler: torch.amp.GradScaler, max_norm: float) -> torch.Tensor:
    """Clip the gradient the step is about to apply to ``max_norm`` by its global L2 norm;
    1 (a device tensor: no host sync) when it was shrunk, else 0.

    Called after the last backward: under DDP the gradients are then the all-reduced average
    on every rank, so each rank takes the norm of the global-batch gradient and scales by the
    same coefficient. clip_grad_norm_ multiplies by min(1, max_norm / (norm + 1e-6)), the
    rule's formula. fp16: unscale first, or the norm is the loss scale's times the true one; an
    overflowed step's norm is inf/nan, GradScaler skips that step, so it is not counted."""
    scaler.unscale_(optimizer)  # a no-op unless fp16
    norm = nn.utils.clip_grad_norm_(module.parameters(), max_norm)
    return ((norm > max_norm) & norm.isfinite()).long()


def dtype_name(dtype: torch.dtype | None) -> str:
    """'bfloat16' for torch.bfloat16; 'none' when the layer never ran in training."""
    return str(dtype).removeprefix("torch.") if dtype is not None else "none"


def compiled_graphs() -> int:
    """Graphs Dynamo captured in this process (0: everything ran eagerly)."""
    # imported here: only compiled runs need Dynamo's internals
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


@torch.no_grad()
def evaluate(model: nn.Module, x: np.ndarray, y: np.ndarray, device: torch.device,
             precision: str, task_loss: TaskLoss) -> tuple[np.ndarray, float]:
    """(the outputs the task scores, loss sum), in the run's precision. The test set may be a
    read-only memory map, which torch will not wrap (it warns, and writing would fault):
    np.require copies only such an array."""
    model.eval()
    labels = torch.from_numpy(np.require(y, requirements="W")).to(device)
    with autocast(device, precision):  # the loss in it too, as in training
        rows = torch.from_numpy(np.require(x, requirements="W")).to(device)
        return task_loss.evaluation(model(rows), labels)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak_memory(devices: list[torch.device]) -> None:
    for device in devices:
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)


def peak_device_mb(devices: list[torch.device]) -> list[float] | None:
    """Allocator peaks per CUDA device; None on CPU, where torch has no such counter."""
    if not devices or devices[0].type != "cuda":
        return None
    return [torch.cuda.max_memory_allocated(d) / 2**20 for d in devices]


def describe(devices: list[torch.device], notes: list[str] | None = None, **extra) -> dict:
    names = [torch.cuda.get_device_name(d) if d.type == "cuda" else "cpu" for d in devices]
    cuda = torch.cuda.is_available()
    nccl = ".".join(map(str, torch.cuda.nccl.version())) if cuda else None
    gpus = [physical_gpu(d.index) for d in devices if d.type == "cuda"]
    return {"framework": "torch", "framework_version": torch.__version__,
            "device_names": names, "gpus": gpus,
            "cuda_version": torch.version.cuda if cuda else None,
            "nccl_version": nccl, "notes": notes or [], **extra}

