"""TensorFlow's dense matmul for ``parbench peak`` (the method is parbench.run.peak's, the
timing loop parbench.run.matmul's): ``python -m parbench.frameworks.tensorflow.peak --dtype D
--threads T [--device cuda] [--sizes N,N]`` prints one JSON line.

Threads as a run's worker sets them (runtime.setup_threads: intra- and inter-op pools), the GPU
as it makes it visible (runtime.configure_devices: memory growth on); the product is eager
``tf.matmul`` (oneDNN on the CPU, cuBLAS on a GPU), timed between
``tf.test.experimental.sync_devices()`` calls on a GPU (eager CPU ops return when done)."""

from __future__ import annotations

import numpy as np

from parbench.run.matmul import Matmul, main, threads_job

from .runtime import configure_devices, setup_threads
from .tfkeras import tf


class TensorFlowMatmul(Matmul):
    framework, version = "tensorflow", tf.__version__

    def __init__(self, dtype: str, threads: int, device: str):
        super().__init__(dtype, threads, device)
        setup_threads(threads_job(threads))
        self.tf_device = configure_devices(0, 1)[0] if device == "cuda" else "/cpu:0"

    def operands(self, a: np.ndarray, b: np.ndarray) -> tuple[tf.Tensor, tf.Tensor]:
        with tf.device(self.tf_device):
            return tuple(tf.cast(tf.constant(m), self.dtype) for m in (a, b))

    def multiply(self, a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
        with tf.device(self.tf_device):
            return tf.matmul(a, b)

    def synchronize(self, outputs: list) -> None:
        if self.device == "cuda":
            tf.test.experimental.sync_devices()

    def dtype_of(self, output: tf.Tensor) -> str:
        return output.dtype.name

    def device_name(self) -> str | None:
        if self.device != "cuda":
            return None
        gpu = tf.config.get_visible_devices("GPU")[0]
        return tf.config.experimental.get_device_details(gpu).get("device_name")

    def float32_matmul(self) -> str | None:
        """TensorFlow runs float32 products as TF32 on GPUs that have it, unless disabled."""
        if self.device != "cuda":
            return None
        enabled = tf.config.experimental.tensor_float_32_execution_enabled()
        return f"tf.config.experimental.tensor_float_32_execution_enabled() = {enabled}"


if __name__ == "__main__":
    main(TensorFlowMatmul)
