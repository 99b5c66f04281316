"""The registry of backends, as lazy import strings: nothing here imports a framework."""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from types import ModuleType


@dataclass(frozen=True)
class Backend:
    name: str
    framework: str  # torch | tensorflow | paddle
    strategy: str  # what the record calls the parallel approach
    module: str  # the strategy file, imported only in the worker process
    launchers: tuple[str, ...]  # the first is the default
    parallel: bool  # can train on more than one device
    needs_gpu_for_parallel: bool = False  # e.g. nn.DataParallel is a no-op without CUDA
    one_process: bool = False  # one process drives every device (DataParallel, Mirrored)

    @property
    def import_name(self) -> str:
        return {"torch": "torch", "tensorflow": "tensorflow", "paddle": "paddle"}[self.framework]

    @property
    def extra(self) -> str:
        return self.framework

    def missing_reason(self) -> str | None:
        """Why this backend cannot run in this environment, or None if it can."""
        if importlib.util.find_spec(self.import_name) is None:
            return f"{self.import_name} is not installed (pip install 'parbench[{self.extra}]')"
        return None

    def load(self) -> ModuleType:
        return importlib.import_module(self.module)


_T, _TF, _PD = "parbench.frameworks.torch", "parbench.frameworks.tensorflow", \
    "parbench.frameworks.paddle"

BACKENDS: dict[str, Backend] = {b.name: b for b in (
    Backend("torch-single", "torch", "single", f"{_T}.single", ("python",), parallel=False),
    Backend("torch-dp", "torch", "DataParallel", f"{_T}.dp", ("python",), parallel=True,
            needs_gpu_for_parallel=True, one_process=True),
    Backend("torch-ddp", "torch", "DistributedDataParallel", f"{_T}.ddp",
            ("torchrun", "spawn"), parallel=True),
    Backend("tf-single", "tensorflow", "single", f"{_TF}.single", ("python",), parallel=False),
    Backend("tf-mirrored", "tensorflow", "MirroredStrategy", f"{_TF}.mirrored", ("python",),
            parallel=True, one_process=True),
    Backend("tf-mirrored-keras", "tensorflow", "MirroredStrategy+fit", f"{_TF}.mirrored_keras",
            ("python",), parallel=True, one_process=True),
    Backend("tf-multiworker", "tensorflow", "MultiWorkerMirroredStrategy",
            f"{_TF}.multiworker", ("tf-config",), parallel=True),
    Backend("paddle-single", "paddle", "single", f"{_PD}.single", ("python",), parallel=False),
    Backend("paddle-spawn", "paddle", "DataParallel", f"{_PD}.spawn", ("spawn",), parallel=True),
    Backend("paddle-launch", "paddle", "DataParallel", f"{_PD}.launch", ("paddle-launch",),
            parallel=True),
)}


def get_backend(name: str) -> Backend:
    if name not in BACKENDS:
        raise KeyError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    return BACKENDS[name]
