"""Paddle's dense matmul for ``parbench peak`` (the method is parbench.run.peak's, the timing
loop parbench.run.matmul's): ``python -m parbench.frameworks.paddle.peak --dtype D --threads T
[--device cuda] [--sizes N,N]`` prints one JSON line.

Threads as a run's worker sets them (runtime.setup_threads: ``set_num_threads`` on Paddle's
runtime); the product is ``paddle.matmul`` (its phi CPU kernel, MKL's GEMM in these wheels, or
cuBLAS on a GPU), timed between ``paddle.device.synchronize()`` calls on a GPU (CPU kernels
return when done)."""

from __future__ import annotations

import numpy as np
import paddle

from parbench.run.matmul import Matmul, main, threads_job

from .runtime import setup_threads


class PaddleMatmul(Matmul):
    framework, version = "paddle", paddle.__version__

    def __init__(self, dtype: str, threads: int, device: str):
        super().__init__(dtype, threads, device)
        setup_threads(threads_job(threads))
        self.place_name = "gpu:0" if device == "cuda" else "cpu"
        self.place = paddle.set_device(self.place_name)

    def operands(self, a: np.ndarray, b: np.ndarray) -> tuple[paddle.Tensor, paddle.Tensor]:
        return tuple(paddle.to_tensor(m, place=self.place).astype(self.dtype) for m in (a, b))

    def multiply(self, a: paddle.Tensor, b: paddle.Tensor) -> paddle.Tensor:
        return paddle.matmul(a, b)

    def synchronize(self, outputs: list) -> None:
        if self.device == "cuda":
            paddle.device.synchronize(self.place_name)

    def dtype_of(self, output: paddle.Tensor) -> str:
        return str(output.dtype).removeprefix("paddle.")

    def device_name(self) -> str | None:
        return paddle.device.cuda.get_device_name(0) if self.device == "cuda" else None

    def float32_matmul(self) -> str | None:
        """Paddle lets cuBLAS run float32 products as TF32 unless the switch is off."""
        if self.device != "cuda":
            return None
        return f"paddle.base.core.get_cublas_switch() = {paddle.base.core.get_cublas_switch()}"


if __name__ == "__main__":
    main(PaddleMatmul)
