"""What devices this machine has, found without importing a framework."""

from __future__ import annotations

import os
import platform
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


def _field(lines: list[str], name: str) -> str | None:
    """A ``Name: value`` line's value from the driver's information file."""
    values = [line.split(":", 1)[1].strip() for line in lines if line.startswith(f"{name}:")]
    return values[0] if values else None


def _visible(gpus: list[tuple[str, str | None]]) -> list[str]:
    """The models of ``gpus`` ((model, uuid) in the driver's order) narrowed the way CUDA
    narrows them: by CUDA_VISIBLE_DEVICES when set, whose entries are indices or GPU UUIDs (a
    prefix will do); CUDA stops at the first entry it cannot resolve (-1, a MIG instance,
    whose share of the GPU no model name tells), and so does this."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return [model for model, _uuid in gpus]
    chosen = []
    for entry in (e.strip() for e in visible.split(",")):
        match = [model for index, (model, uuid) in enumerate(gpus)
                 if entry == str(index) or (entry.startswith("GPU-") and uuid is not None
                                            and uuid.startswith(entry))]
        if len(match) != 1:
            break
        chosen.append(match[0])
    return chosen


def gpu_models(driver: Path = Path("/proc/driver/nvidia/gpus")) -> list[str]:
    """The model name of each NVIDIA GPU this process may use as the driver reports it (the
    name nvidia-smi and torch.cuda.get_device_name give, e.g. 'NVIDIA H100 80GB HBM3'), in PCI
    bus order (nvidia-smi's; CUDA's with CUDA_DEVICE_ORDER=PCI_BUS_ID, or whenever the GPUs are
    of one model), narrowed by CUDA_VISIBLE_DEVICES as gpu_count is. Empty without the driver.
    ``driver``: the driver's folder of GPUs (another one in tests)."""
    if not driver.is_dir():
        return []
    gpus = []
    for gpu in sorted(driver.iterdir()):  # named by PCI bus id
        try:
            lines = (gpu / "information").read_text().splitlines()
        except OSError:
            lines = []
        gpus.append((_field(lines, "Model") or "unknown", _field(lines, "GPU UUID")))
    return _visible(gpus)


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (what records call env.cpu_model), else the
    platform's word for it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"
