"""What every torch strategy shares: device and threads, the optimizer step, evaluation,
and the facts a record needs (versions, devices, memory peaks)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from parbench.job import Job
from parbench.optim import OptimizerSpec


def setup_threads(job: Job) -> None:
    """Fix the compute threads (they change both speed and the bits of the result)."""
    torch.manual_seed(job.seed)
    torch.set_num_threads(job.threads)


def sgd(model: nn.Module, spec: OptimizerSpec) -> torch.optim.SGD:
    """torch's SGD is the shared update rule exactly (see parbench.optim)."""
    return torch.optim.SGD(model.parameters(), lr=spec.lr, momentum=spec.momentum,
                           weight_decay=spec.weight_decay)


def train_step(model: nn.Module, optimizer: torch.optim.SGD, x: np.ndarray, y: np.ndarray,
               lr: float, device: torch.device) -> float:
    for group in optimizer.param_groups:
        group["lr"] = lr  # the schedule is computed in common and fed per step
    inputs = torch.from_numpy(x).to(device, non_blocking=True)
    labels = torch.from_numpy(y).to(device, non_blocking=True)
    model.train()
    loss = F.cross_entropy(model(inputs), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss.item()


@torch.no_grad()
def evaluate(model: nn.Module, x: np.ndarray, y: np.ndarray,
             device: torch.device) -> tuple[int, float]:
    model.eval()
    logits = model(torch.from_numpy(x).to(device))
    labels = torch.from_numpy(y).to(device)
    loss_sum = F.cross_entropy(logits, labels, reduction="sum").item()
    return int((logits.argmax(1) == labels).sum().item()), loss_sum


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
    return {"framework": "torch", "framework_version": torch.__version__,
            "device_names": names, "cuda_version": torch.version.cuda if cuda else None,
            "nccl_version": nccl, "notes": notes or [], **extra}
