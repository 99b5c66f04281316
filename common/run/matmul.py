"""The timing loop of ``parbench peak``, run inside one framework's own process by
``frameworks/<framework>/peak.py``: the method is written down in parbench.run.peak. One loop
for the four frameworks, so that their figures differ by the frameworks' kernels and not by
how each was timed; a framework supplies only what differs (a ``Matmul``): how its threads
are set, how operands are put on the device, the product itself, and how the device is
synchronised before the clock is read.

Command line of every framework's module (what parbench.run.peak.measure runs):
``python -m parbench.frameworks.<framework>.peak --dtype D --threads T [--device cuda]
[--sizes 512,1024] [--budget SECONDS]``; it prints one JSON line (``time_sizes``' result).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np

from .job import Job

DTYPES = ("float32", "bfloat16", "float16")
DEVICES = ("cpu", "cuda")
CPU_SIZES = (512, 1024, 2048)  # n of the square products, ascending
GPU_SIZES = (2048, 4096, 8192, 16384)
BUDGET_S = {"cpu": 0.75, "cuda": 1.0}  # sampling time per size
MIN_SAMPLES, MAX_SAMPLES = 5, 50
SAMPLE_S = 0.01  # a sample times enough back-to-back products to last this long
MAX_BATCH = 100  # products per sample at most (their outputs are held until synchronised)
MESSAGE = 160  # characters of a refusal's first line kept
TOO_SLOW = 4  # skip a size whose least sampling would take this many budgets


class Matmul(ABC):
    """One framework's dense product of two n x n matrices in one dtype on one device, set up
    (threads, device) by ``__init__``, before any operand exists."""

    framework: str  # the registry's name
    version: str  # what the records call framework_version

    def __init__(self, dtype: str, threads: int, device: str):
        self.dtype, self.threads, self.device = dtype, threads, device

    @abstractmethod
    def operands(self, a: np.ndarray, b: np.ndarray) -> tuple[Any, Any]:
        """float32 numpy matrices as the framework's, in ``self.dtype``, on the device."""

    @abstractmethod
    def multiply(self, a: Any, b: Any) -> Any:
        """a @ b as a run's layers compute it (the framework's default matmul)."""

    @abstractmethod
    def synchronize(self, outputs: list) -> None:
        """Return only once ``outputs`` (and all work queued before them) are computed."""

    @abstractmethod
    def dtype_of(self, output: Any) -> str:
        """The product's dtype by parbench's name (float32, bfloat16, float16)."""

    def device_name(self) -> str | None:
        """The GPU's name as the framework reports it (None on the CPU)."""
        return None

    def float32_matmul(self) -> str | None:
        """On a GPU, the framework's setting that decides whether float32 products may run as
        TF32 (None on the CPU, where none does)."""
        return None


def threads_job(threads: int) -> Job:
    """A run's Job that says only how many compute threads to use (and seed 0): the
    frameworks' runtime functions that fix a worker's threads take the run's job and read its
    threads (and seed, verbose), so the peak's threads are set by exactly those functions."""
    return Job(backend="peak", launcher="none", world_size=1, threads=threads, model={},
               dataset="none", task_name="none", task_fields={}, global_batch=0,
               total_steps=0, optimizer={}, seed=0, workdir="", shared="")


def sample(matmul: Matmul, a: Any, b: Any, batch: int) -> float:
    """Seconds per product over ``batch`` back-to-back products, the device synchronised
    before the clock is read at both ends."""
    matmul.synchronize([])
    start = time.perf_counter()
    outputs = [matmul.multiply(a, b) for _ in range(batch)]
    matmul.synchronize(outputs)
    return (time.perf_counter() - start) / batch


def time_size(matmul: Matmul, size: int, budget: float) -> dict:
    """One size's figure: two warm-up products (the first compiles where the framework
    compiles), then samples until ``budget`` seconds are spent (MIN_SAMPLES to MAX_SAMPLES);
    TFLOP/s from the median seconds per product. ``first_s``: the warm-up's second product."""
    rng = np.random.default_rng(size)
    a, b = matmul.operands(*(rng.standard_normal((size, size), np.float32) for _ in "ab"))
    sample(matmul, a, b, 1)
    first = sample(matmul, a, b, 1)
    batch = min(MAX_BATCH, max(1, math.ceil(SAMPLE_S / first)))
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < MAX_SAMPLES and (len(times) < MIN_SAMPLES
                                        or time.perf_counter() - start < budget):
        times.append(sample(matmul, a, b, batch))
    median = statistics.median(times)
    return {"size": size, "tflops": 2 * size ** 3 / median / 1e12, "median_s": median,
            "samples": len(times), "products_per_sample": batch, "first_s": first}


def unsupported(matmul: Matmul) -> str | None:
    """Why the framework has no such product here (one line), from a small trial: no kernel
    for the dtype on the device, or a product that comes back in another dtype."""
    rng = np.random.default_rng(0)
    try:
        a, b = matmul.operands(*(rng.standard_normal((64, 64), np.float32) for _ in "ab"))
        output = matmul.multiply(a, b)
        matmul.synchronize([output])
    except Exception as error:  # noqa: BLE001  (any refusal is the answer, not a crash)
        first = (str(error).strip().splitlines() or [""])[0].split(". ")[0]  # one sentence
        first = first if len(first) <= MESSAGE else first[:MESSAGE - 3] + "..."
        return f"no {matmul.dtype} matmul on {matmul.device}: {type(error).__name__}: {first}"
    got = matmul.dtype_of(output)
    if got != matmul.dtype:
        return f"a {matmul.dtype} matmul on {matmul.device} returns {got}"
    return None


def time_sizes(matmul: Matmul, sizes: Sequence[int], budget: float) -> dict:
    """The peak: the best of the sizes' figures, with every size's figure; or, without such a
    product, ``unsupported`` saying why and no figure. Sizes go up until the next one would
    take more than TOO_SLOW budgets to sample (its product time predicted as n^3 from the
    last one's): an emulated dtype is slow enough to stall the whole command."""
    result = {"framework": matmul.framework, "framework_version": matmul.version,
              "dtype": matmul.dtype, "threads": matmul.threads, "device": matmul.device,
              "device_name": matmul.device_name(), "float32_matmul": matmul.float32_matmul(),
              "tflops": None, "best_size": None, "sizes": [], "skipped_sizes": [],
              "unsupported": unsupported(matmul)}
    if result["unsupported"]:
        return result
    ordered = sorted(set(sizes))
    for index, size in enumerate(ordered):
        if result["sizes"] and _predicted_s(result["sizes"][-1], size) > TOO_SLOW * budget:
            result["skipped_sizes"] = ordered[index:]
            break
        result["sizes"].append(time_size(matmul, size, budget))
    best = max(result["sizes"], key=lambda figure: figure["tflops"])
    return {**result, "tflops": best["tflops"], "best_size": best["size"]}


def _predicted_s(last: dict, size: int) -> float:
    """Seconds a size would take to sample at least (its warm-up and MIN_SAMPLES products),
    its product time scaled from the last size's by n^3."""
    return (2 + MIN_SAMPLES) * last["median_s"] * (size / last["size"]) ** 3


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="time dense matmuls; print one JSON line")
    parser.add_argument("--dtype", choices=DTYPES, required=True)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--device", choices=DEVICES, default="cpu")
    parser.add_argument("--sizes", help="comma-separated n of the n x n products (default: "
                        f"{CPU_SIZES} on the CPU, {GPU_SIZES} on a GPU)")
    parser.add_argument("--budget", type=float, help="sampling seconds per size (default: "
                        f"{BUDGET_S})")
    return parser.parse_args(argv)


def main(matmul_class: type[Matmul], argv: Sequence[str] | None = None) -> None:
    """A framework module's entry point: set up, time, print the result as one JSON line."""
    args = parse_args(argv)
    default = GPU_SIZES if args.device == "cuda" else CPU_SIZES
    sizes = [int(size) for size in args.sizes.split(",")] if args.sizes else default
    matmul = matmul_class(args.dtype, args.threads, args.device)
    budget = args.budget if args.budget is not None else BUDGET_S[args.device]
    print(json.dumps(time_sizes(matmul, sizes, budget)))
