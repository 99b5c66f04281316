"""torch's dense matmul for ``parbench peak`` (the method is parbench.run.peak's, the timing
loop parbench.run.matmul's): ``python -m parbench.frameworks.torch.peak --dtype D --threads T
[--device cuda] [--sizes N,N]`` prints one JSON line.

Threads as a run's worker sets them (runtime.setup_threads: ``torch.set_num_threads``); the
product is ``a @ b`` (oneDNN or MKL on the CPU, cuBLAS on a GPU), timed between
``torch.cuda.synchronize()`` calls on a GPU (CPU products return when done)."""

from __future__ import annotations

import numpy as np
import torch

from parbench.run.matmul import Matmul, main, threads_job

from .runtime import setup_threads

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
NAMES = {dtype: name for name, dtype in DTYPES.items()}


class TorchMatmul(Matmul):
    framework, version = "torch", torch.__version__

    def __init__(self, dtype: str, threads: int, device: str):
        super().__init__(dtype, threads, device)
        setup_threads(threads_job(threads))
        self.torch_device = torch.device("cuda:0" if device == "cuda" else "cpu")

    def operands(self, a: np.ndarray, b: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        return tuple(torch.from_numpy(m).to(self.torch_device, DTYPES[self.dtype])
                     for m in (a, b))

    def multiply(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b

    def synchronize(self, outputs: list) -> None:
        if self.torch_device.type == "cuda":
            torch.cuda.synchronize(self.torch_device)

    def dtype_of(self, output: torch.Tensor) -> str:
        return NAMES.get(output.dtype, str(output.dtype))

    def device_name(self) -> str | None:
        cuda = self.torch_device.type == "cuda"
        return torch.cuda.get_device_name(self.torch_device) if cuda else None

    def float32_matmul(self) -> str | None:
        """'highest' is IEEE float32; 'high' or 'medium' let cuBLAS use TF32 (or bf16)."""
        if self.torch_device.type != "cuda":
            return None
        return f"torch.get_float32_matmul_precision() = {torch.get_float32_matmul_precision()}"


if __name__ == "__main__":
    main(TorchMatmul)
