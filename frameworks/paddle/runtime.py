"""What every Paddle strategy shares: device and threads, the optimizer step (with
--clip-grad-norm), evaluation, and the facts a record needs (versions, devices, memory peaks).
The optimizers themselves are in optim.py; PaddleStrategy, the strategies' base class, is in
strategy.py."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import numpy as np
import paddle
import paddle.distributed as dist
from paddle import nn

from parbench.base.devices import physical_gpu
from parbench.run.footprint import StateBytes
from parbench.run.job import Job
from parbench.run.modes import Modes

from .optim import GlobalNormClip
from .tasks import TaskLoss

# The OpenMP runtime Paddle's CPU kernels (MKL, oneDNN) use; wheels without it report None.
_IOMP = Path(paddle.__file__).parent / "libs" / "libiomp5.so"
AMP_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}  # --precision -> auto_cast's dtype
Rows = np.ndarray | paddle.Tensor  # a step's rows: numpy (--input arrays) or the loader's


def setup_threads(job: Job) -> None:
    """Fix the compute threads (they change both speed and the bits of the result).

    ``import paddle`` forces OMP_NUM_THREADS=1 when it is unset, and the harness exports its
    own value; neither is trusted: the count is set on Paddle's runtime itself.
    """
    paddle.seed(job.seed)
    paddle.base.core.set_num_threads(job.threads)


def compute_threads() -> int | None:
    """The thread count Paddle's CPU kernels will use, read back from its OpenMP runtime."""
    if not _IOMP.is_file():
        return None
    return int(ctypes.CDLL(str(_IOMP)).omp_get_max_threads())


def has_gpu() -> bool:
    return paddle.device.cuda.device_count() > 0


def use_device(distributed: bool) -> str:
    """Make this process's GPU (the launcher's choice when distributed) or the CPU current."""
    if not has_gpu():
        device = "cpu"
    else:  # ParallelEnv's device_id is only defined when the launcher selected GPUs
        device = f"gpu:{dist.ParallelEnv().device_id if distributed else 0}"
    paddle.set_device(device)
    return device


def precision(modes: Modes) -> AbstractContextManager:
    """The autocast of --precision around forward and loss (nothing for fp32)."""
    dtype = AMP_DTYPES.get(modes.precision)
    return paddle.amp.auto_cast(level="O1", dtype=dtype) if dtype else nullcontext()


def split_rows(rows: Rows, k: int) -> list[Rows]:
    """k contiguous micro-batches: numpy rows (--input arrays) split in numpy, the native
    loader's tensors with paddle.split (they stay tensors)."""
    return paddle.split(rows, k) if isinstance(rows, paddle.Tensor) else np.split(rows, k)


def as_tensor(rows: Rows) -> paddle.Tensor:
    """The loader's tensors as they are (already on the device); numpy rows copied in."""
    return rows if isinstance(rows, paddle.Tensor) else paddle.to_tensor(rows)


class TrainStep:
    """One optimizer step with --precision, --grad-accum and --clip-grad-norm, on ``model`` (a
    Layer or paddle.DataParallel). ``no_sync`` (DataParallel's) wraps the forward and backward
    of the first K-1 micro-batches, so gradients are all-reduced once per step, in the last
    backward (the gradients summed over all of them)."""

    def __init__(self, model: nn.Layer, optimizer: paddle.optimizer.Optimizer, modes: Modes,
                 task_loss: TaskLoss, clip: GlobalNormClip | None = None,
                 no_sync: Callable[[], AbstractContextManager] = nullcontext):
        self.model, self.optimizer, self.modes = model, optimizer, modes
        self.task_loss, self.clip, self.no_sync = task_loss, clip, no_sync
        # fp16's 5-bit exponent underflows small gradients; bf16 has float32's range
        self.scaler = paddle.amp.GradScaler() if modes.precision == "fp16" else None
        self.micro_batches = 0  # backward passes in the first step (0 before it)

    def __call__(self, x: Rows, y: Rows, lr: float) -> float:
        self.optimizer.set_lr(lr)  # the schedule is computed in common and fed per step
        self.model.train()
        k, loss = self.modes.grad_accum, 0.0
        parts = list(zip(split_rows(x, k), split_rows(y, k)))  # contiguous micro-batches
        for passes, (part_x, part_y) in enumerate(parts, start=1):
            with nullcontext() if passes == k else self.no_sync():  # all-reduce in the last
                loss += self._backward(part_x, part_y, k)
        self.count_first_step(len(parts))
        self.apply()
        return loss  # the mean over this process's rows

    def count_first_step(self, passes: int) -> None:
        """Record the backward passes of the first step (the profiler's step may be it)."""
        self.micro_batches = self.micro_batches or passes

    def _backward(self, x: Rows, y: Rows, k: int) -> float:
        """Forward, loss / k, backward; returns the scaled loss (k of them sum to the mean)."""
        with precision(self.modes):
            loss = self.task_loss.mean_loss(self.model(as_tensor(x)), as_tensor(y)) / k
        (self.scaler.scale(loss) if self.scaler else loss).backward()
        return float(loss)

    def apply(self) -> None:
        """Clip (once per optimizer step, after accumulation: the gradients are the global
        batch's by now, DataParallel averaged them in backward), update, clear."""
        if self.scaler and self.clip:  # clip the true gradients, not the scaled ones
            self.scaler.unscale_(self.optimizer)
        if self.clip:
            self.clip()
        if self.scaler:  # unscales unless done above, skips the step on inf/nan, adapts
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.clear_grad()

    @property
    def clipped_steps(self) -> int | None:
        """Steps so far whose global-batch gradient norm exceeded --clip-grad-norm (None: the
        step does not clip)."""
        return None if self.clip is None else self.clip.clipped_steps


@paddle.no_grad()
def evaluate(model: nn.Layer, x: np.ndarray, y: np.ndarray, modes: Modes,
             task_loss: TaskLoss) -> tuple[np.ndarray, float]:
    """(the outputs the task scores, loss sum), in the precision the model trains in."""
    model.eval()
    with precision(modes):  # the loss in it too, as in training
        return task_loss.evaluation(model(paddle.to_tensor(x)), paddle.to_tensor(y))


def synchronize(device: str) -> None:
    if device.startswith("gpu"):
        paddle.device.synchronize(device)


def reset_peak_memory(devices: list[str]) -> None:
    for device in devices:
        if device.startswith("gpu"):
            paddle.device.cuda.reset_max_memory_allocated(device)


def peak_device_mb(devices: list[str]) -> list[float] | None:
    """Allocator peaks per GPU; None on CPU, where Paddle has no such counter (it raises)."""
    if not devices or not devices[0].startswith("gpu"):
        return None
    return [paddle.device.cuda.max_memory_allocated(d) / 2**20 for d in devices]


def describe(devices: list[str], notes: list[str] | None = None, **extra) -> dict:
    gpu = devices[0].startswith("gpu")
    names = [paddle.device.cuda.get_device_name(d) if gpu else "cpu" for d in devices]
    gpus = [physical_gpu(int(d.split(":")[1])) for d in devices if d.startswith("gpu")]
    return {"framework": "paddle", "framework_version": paddle.__version__,
            "device_names": names, "gpus": gpus,
            "cuda_version": paddle.version.cuda() if gpu else None,
            "nccl_version": str(paddle.version.nccl()) if gpu else None,
            "compute_threads": compute_threads(), "notes": notes or [], **extra}



def tensor_bytes(tensors) -> int:
    return sum(int(np.prod(t.shape)) * t.element_size() for t in tensors)


def state_bytes(module: nn.Layer, optimizer: paddle.optimizer.Optimizer) -> StateBytes:
    """The trainable parameters, their gradients and the optimizer accumulators (momentum,
    Adam moments and beta powers; AdamW's master weights where it keeps them) this process
    holds. BatchNorm's running statistics are Paddle parameters too (stop_gradient): left out,
    as the other frameworks' buffers and non-trainable variables are."""
    params = [p for p in module.parameters() if not p.stop_gradient]
    moments = [t for per_param in optimizer._accumulators.values() for t in per_param.values()]
    masters = list(getattr(optimizer, "_master_weights", {}).values())
    return StateBytes(parameters=tensor_bytes(params),
                      gradients=tensor_bytes(p.grad for p in params if p.grad is not None),
                      optimizer=tensor_bytes(moments + masters))
