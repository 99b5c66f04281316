"""JAX's dense matmul for ``parbench peak`` (the method is parbench.run.peak's, the timing loop
parbench.run.matmul's): ``python -m parbench.frameworks.jax.peak --dtype D --threads T
[--device cuda] [--sizes N,N]`` prints one JSON line.

Threads as a run's worker sets them (runtime.configure: PJRT_NPROC bounds XLA's CPU pool, one
host device), before anything starts JAX's backend; the product is a jitted ``jnp.matmul``
(compiled in the warm-up), timed between ``jax.block_until_ready`` calls on every output
(JAX dispatches asynchronously, on the CPU too)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from parbench.run.matmul import Matmul, main, threads_job

from .runtime import configure

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}


class JaxMatmul(Matmul):
    framework, version = "jax", jax.__version__

    def __init__(self, dtype: str, threads: int, device: str):
        super().__init__(dtype, threads, device)
        configure(threads_job(threads), devices=1)  # starts nothing: the backend reads it later
        self.jax_device = jax.devices("gpu" if device == "cuda" else "cpu")[0]
        self.product = jax.jit(jnp.matmul)

    def operands(self, a: np.ndarray, b: np.ndarray) -> tuple[jax.Array, jax.Array]:
        return tuple(jax.device_put(m, self.jax_device).astype(DTYPES[self.dtype])
                     for m in (a, b))

    def multiply(self, a: jax.Array, b: jax.Array) -> jax.Array:
        return self.product(a, b)

    def synchronize(self, outputs: list) -> None:
        jax.block_until_ready(outputs)

    def dtype_of(self, output: jax.Array) -> str:
        return output.dtype.name

    def device_name(self) -> str | None:
        return self.jax_device.device_kind if self.device == "cuda" else None

    def float32_matmul(self) -> str | None:
        """None (XLA's DEFAULT precision) lets XLA run float32 products as TF32 on GPUs."""
        if self.device != "cuda":
            return None
        return f"jax_default_matmul_precision = {jax.config.jax_default_matmul_precision}"


if __name__ == "__main__":
    main(JaxMatmul)
