"""What every Paddle strategy shares: device and threads, the optimizer step, evaluation,
and the facts a record needs (versions, devices, memory peaks)."""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np
import paddle
import paddle.distributed as dist
import paddle.nn.functional as F
from paddle import nn

from parbench.job import Job
from parbench.optim import OptimizerSpec

# The OpenMP runtime Paddle's CPU kernels (MKL, oneDNN) use; wheels without it report None.
_IOMP = Path(paddle.__file__).parent / "libs" / "libiomp5.so"


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


def sgd(model: nn.Layer, spec: OptimizerSpec) -> paddle.optimizer.Momentum:
    """Paddle's Momentum with a float weight decay is the shared update rule exactly (L2 decay
    fused into the kernel: ``g + wd*p``, ``buf = m*buf + g``, ``p -= lr*buf``)."""
    # BatchNorm's running statistics are non-trainable parameters in Paddle: leave them out
    trainable = [p for p in model.parameters() if p.trainable]
    return paddle.optimizer.Momentum(learning_rate=spec.lr, momentum=spec.momentum,
                                     parameters=trainable, weight_decay=spec.weight_decay)


def train_step(model: nn.Layer, optimizer: paddle.optimizer.Momentum, x: np.ndarray,
               y: np.ndarray, lr: float) -> float:
    optimizer.set_lr(lr)  # the schedule is computed in common and fed per step
    model.train()
    loss = F.cross_entropy(model(paddle.to_tensor(x)), paddle.to_tensor(y))
    loss.backward()
    optimizer.step()
    optimizer.clear_grad()
    return float(loss)


@paddle.no_grad()
def evaluate(model: nn.Layer, x: np.ndarray, y: np.ndarray) -> tuple[int, float]:
    model.eval()
    logits = model(paddle.to_tensor(x))
    labels = paddle.to_tensor(y)
    loss_sum = float(F.cross_entropy(logits, labels, reduction="sum"))
    return int((logits.argmax(1) == labels).sum()), loss_sum


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
    return {"framework": "paddle", "framework_version": paddle.__version__,
            "device_names": names, "cuda_version": paddle.version.cuda() if gpu else None,
            "nccl_version": str(paddle.version.nccl()) if gpu else None,
            "compute_threads": compute_threads(), "notes": notes or [], **extra}
