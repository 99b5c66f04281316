"""How far each framework's single-device backend is from this machine's limit at the default
configuration: the model FLOPs of one step (from the spec), the achieved TFLOP/s and their share
of the dense matmul peak ``parbench peak`` measured with the same framework, dtype and threads.

    python benchmarks/utilisation.py [--model resnet] [--model gpt ...]

The peaks are measured first where the cache lacks them (``parbench peak``, its own cache); each
run is a plain ``parbench run <single backend> [--model M]``, its figures read from its record
(metrics.flops), so the table shows what a record holds. Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from tabulate import tabulate
from timing import run_record

from parbench.contract.spec import MODEL_NAMES
from parbench.run.registry import FRAMEWORKS

HEADERS = ("backend", "model", "GFLOP/step", "step ms", "TFLOP/s", "peak TFLOP/s", "util. %",
           "threads", "CPU")


def parbench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "parbench.cli", *args], capture_output=True,
                          text=True)


def row(record: dict) -> list:
    flops = record["metrics"]["flops"]
    peak, share = flops["measured_peak_tflops"], flops["utilisation"]
    return [record["backend"], record["model"], flops["per_step"] / 1e9,
            record["metrics"]["step_time_ms"]["median"], flops["achieved_tflops"],
            "" if peak is None else peak, "" if share is None else 100 * share,
            record["env"]["threads_per_worker"], record["env"]["cpu_model"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", choices=MODEL_NAMES,
                        help="repeatable (default: resnet, the default configuration's)")
    models = parser.parse_args().model or ["resnet"]
    singles = [framework.single for framework in FRAMEWORKS.values()
               if framework.missing_reason() is None]
    measured = parbench("peak")
    print(measured.stdout, file=sys.stderr)
    if measured.returncode != 0:
        sys.exit(f"parbench peak failed:\n{measured.stderr[-3000:]}")
    rows = []
    for model in models:
        for backend in singles:
            print(f"utilisation: {backend} --model {model}", file=sys.stderr)
            rows.append(row(run_record(backend, "--model", model)))
    print(tabulate(rows, headers=HEADERS, tablefmt="github", floatfmt=".4g"))


if __name__ == "__main__":
    main()
