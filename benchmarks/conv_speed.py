"""Why a JAX step on CPU is about twice torch's: one convolution of the resnet's first stage
(128 x 8 x 32 x 32, 8 -> 8 channels, 3x3), its forward, input gradient and weight gradient,
timed alone in torch (oneDNN) and in JAX (XLA's CPU convolution), 2 threads each, each
framework in a process of its own, alternated A B A B. The gradient columns are one call each:
torch runs the forward and the backward; XLA drops the forward where the gradient does not
need its output (the input gradient of a convolution).

    python benchmarks/conv_speed.py [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import numpy as np

SHAPE, KERNEL, THREADS = (128, 8, 32, 32), (8, 8, 3, 3), 2


def timed(fn, sync) -> float:
    """Median ms of 30 calls after 3 warm-up calls."""
    for _ in range(3):
        sync(fn())
    times = []
    for _ in range(30):
        start = time.perf_counter()
        sync(fn())
        times.append(time.perf_counter() - start)
    return 1000 * float(np.median(times))


def inputs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return (rng.normal(0, 1, SHAPE).astype(np.float32),
            rng.normal(0, 0.1, KERNEL).astype(np.float32))


def torch_times() -> tuple[float, float, float]:
    import torch

    torch.set_num_threads(THREADS)
    x, w = (torch.tensor(a, requires_grad=True) for a in inputs())
    seed = torch.ones(SHAPE)

    def conv(x, w):
        return torch.nn.functional.conv2d(x, w, padding=1)
    return (timed(lambda: conv(x.detach(), w.detach()), lambda r: r),
            timed(lambda: torch.autograd.grad(conv(x, w), x, seed)[0], lambda r: r),
            timed(lambda: torch.autograd.grad(conv(x, w), w, seed)[0], lambda r: r))


def jax_times() -> tuple[float, float, float]:
    os.environ["PJRT_NPROC"] = str(THREADS)  # what bounds XLA's CPU pool (frameworks/jax)
    import jax
    from jax import lax

    x, w = (jax.numpy.asarray(a) for a in inputs())

    def conv(x, w):
        return lax.conv_general_dilated(x, w, (1, 1), ((1, 1), (1, 1)),
                                        dimension_numbers=("NCHW", "OIHW", "NCHW"))
    programs = [jax.jit(conv)] + [jax.jit(jax.grad(lambda x, w: conv(x, w).sum(), argnums=a))
                                  for a in (0, 1)]
    return tuple(timed(lambda p=p: p(x, w), jax.block_until_ready) for p in programs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--framework", choices=("torch", "jax"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.framework:
        print(" ".join(f"{t:.2f}" for t in (torch_times if args.framework == "torch"
                                            else jax_times)()))
        return
    print("| round | framework | forward ms | forward + input gradient ms | "
          "forward + weight gradient ms |")
    print("|---|---|---|---|---|")
    for round_ in range(args.rounds):
        for framework in ("torch", "jax"):
            done = subprocess.run([sys.executable, __file__, "--framework", framework],
                                  capture_output=True, text=True, check=True)
            print(f"| {round_} | {framework} | " + " | ".join(done.stdout.split()) + " |")


if __name__ == "__main__":
    main()
