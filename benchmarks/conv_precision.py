"""Why bf16 and fp16 training is slow on this CPU: one of the resnet's 3x3 convolutions (a
128-row batch of 34x34x8 padded activations, 8 filters), forward and backward timed apart, per
dtype, in torch or TensorFlow (one framework per process).

    python benchmarks/conv_precision.py torch
    python benchmarks/conv_precision.py tensorflow

Prints the median of ``--repeats`` timed calls (after one untimed call) in ms. Measured here
(2 Intel Xeon vCPUs with AVX-512 FP16 and BF16): the fp16 forward within about 2x of fp32, the
fp16 backward 50 to 80 times slower, in both frameworks (docs/results.md, "Modes, every
framework").
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import numpy as np

BATCH, SIZE, CHANNELS, THREADS = 128, 34, 8, 2
DTYPES = ("float32", "bfloat16", "float16")


def median_ms(call: Callable[[], object], repeats: int) -> float:
    call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return float(np.median(times) * 1000)


def torch_times(dtype: str, repeats: int) -> tuple[float, float]:
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(THREADS)
    kind = getattr(torch, dtype)
    x = torch.randn(BATCH, CHANNELS, SIZE, SIZE, dtype=kind, requires_grad=True)
    weight = torch.randn(CHANNELS, CHANNELS, 3, 3, dtype=kind, requires_grad=True)
    out = F.conv2d(x, weight)
    grad = torch.ones_like(out)
    forward = median_ms(lambda: F.conv2d(x, weight), repeats)
    backward = median_ms(lambda: torch.autograd.grad(out, (x, weight), grad,
                                                     retain_graph=True), repeats)
    return forward, backward


def tensorflow_times(dtype: str, repeats: int) -> tuple[float, float]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(THREADS)
    tf.config.threading.set_inter_op_parallelism_threads(THREADS)
    x = tf.cast(tf.random.normal([BATCH, SIZE, SIZE, CHANNELS]), dtype)
    weight = tf.cast(tf.random.normal([3, 3, CHANNELS, CHANNELS]), dtype)
    grad = tf.ones([BATCH, SIZE - 2, SIZE - 2, CHANNELS], dtype)
    forward = tf.function(lambda: tf.nn.conv2d(x, weight, 1, "VALID"))
    # the two gradients of a convolution, as its backward computes them
    backward = tf.function(lambda: (
        tf.raw_ops.Conv2DBackpropInput(input_sizes=tf.shape(x), filter=weight,
                                       out_backprop=grad, strides=[1, 1, 1, 1], padding="VALID"),
        tf.raw_ops.Conv2DBackpropFilter(input=x, filter_sizes=tf.shape(weight),
                                        out_backprop=grad, strides=[1, 1, 1, 1],
                                        padding="VALID")))
    return (median_ms(lambda: forward().numpy(), repeats),
            median_ms(lambda: [g.numpy() for g in backward()], repeats))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("framework", choices=("torch", "tensorflow"))
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    measure = torch_times if args.framework == "torch" else tensorflow_times
    print(f"{args.framework}: 3x3 conv, {BATCH}x{CHANNELS}x{SIZE}x{SIZE}, {THREADS} threads")
    for dtype in DTYPES:
        forward, backward = measure(dtype, args.repeats)
        print(f"{dtype:>9}: forward {forward:8.2f} ms   backward {backward:8.2f} ms")


if __name__ == "__main__":
    main()
