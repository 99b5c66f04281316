"""What devices this machine has, found without importing a framework."""

from __future__ import annotations

import os
from pathlib import Path


def cpu_count() -> int:
    return len(os.sched_getaffinity(0))


def gpu_count() -> int:
    """NVIDIA GPUs the driver exposes, narrowed by CUDA_VISIBLE_DEVICES when it is set."""
    driver = Path("/proc/driver/nvidia/gpus")
    present = len(list(driver.iterdir())) if driver.is_dir() else 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return present
    return min(present, len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"]))


def physical_gpu(index: int) -> str:
    """Which of the machine's GPUs a process's CUDA device ``index`` is: its entry in
    CUDA_VISIBLE_DEVICES (an index or a UUID) where that narrows the devices, else the index.
    Two ranks with the same answer drove the same GPU."""
    visible = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
               if d.strip()]
    return visible[index] if index < len(visible) else str(index)
