"""How far each framework's single-device backend is from this machine's limit at the default
configuration: the model FLOPs of one step (from the spec), the achieved TFLOP/s and their share
of the dense matmul peak ``parbench peak`` measured with the same framework, dtype and threads.

    python benchmarks/utilisation.py [--model resnet] [--model gpt ...] [--steps 12]
    python benchmarks/utilisation.py --medium

``--medium`` runs each task's default model and its ``--preset medium`` side by side, and exits
1 unless torch-single reaches MEDIUM_TARGET of its peak at every medium preset (the size was
chosen for that: parbench.contract.tasks).

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

MEDIUM_TARGET = 0.5
MEDIUM_STEPS = 12
# each task's default model, then its medium preset (the task of --model gpt, of the others)
MEDIUM_SIZES = (("default", ()), ("medium", ("--preset", "medium")),
                ("default", ("--model", "gpt")), ("medium", ("--model", "gpt", "--preset",
                                                            "medium")))
HEADERS = ("backend", "size", "model", "GFLOP/step", "step ms", "TFLOP/s", "peak TFLOP/s",
           "util. %", "threads", "CPU")
UTIL = HEADERS.index("util. %")


def parbench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "parbench.cli", *args], capture_output=True,
                          text=True)


def row(record: dict, size: str) -> list:
    flops = record["metrics"]["flops"]
    peak, share = flops["measured_peak_tflops"], flops["utilisation"]
    return [record["backend"], size, record["model"], flops["per_step"] / 1e9,
            record["metrics"]["step_time_ms"]["median"], flops["achieved_tflops"],
            "" if peak is None else peak, "" if share is None else 100 * share,
            record["env"]["threads_per_worker"], record["env"]["cpu_model"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", choices=MODEL_NAMES,
                        help="repeatable (default: resnet, the default configuration's)")
    parser.add_argument("--medium", action="store_true",
                        help="each task's default model and its --preset medium, and check "
                        f"that torch-single reaches {MEDIUM_TARGET:.0%} of its peak there")
    parser.add_argument("--steps", type=int, help="steps per run (the run's default budget; "
                        f"--medium {MEDIUM_STEPS})")
    args = parser.parse_args()
    if args.medium and args.model:
        parser.error("--medium runs its own sizes; give no --model beside it")
    sizes = MEDIUM_SIZES if args.medium else [("default", ("--model", model))
                                              for model in args.model or ["resnet"]]
    # a few steps measure speed; the language model's recipe (640 steps) is for learning
    steps = args.steps or (MEDIUM_STEPS if args.medium else None)
    budget = ("--steps", str(steps)) if steps else ()
    singles = [framework.single for framework in FRAMEWORKS.values()
               if framework.missing_reason() is None]
    measured = parbench("peak")
    print(measured.stdout, file=sys.stderr)
    if measured.returncode != 0:
        sys.exit(f"parbench peak failed:\n{measured.stderr[-3000:]}")
    rows = []
    for size, options in sizes:
        for backend in singles:
            print(f"utilisation: {backend} {' '.join(options)}", file=sys.stderr)
            rows.append(row(run_record(backend, *options, *budget), size))
    print(tabulate(rows, headers=HEADERS, tablefmt="github", floatfmt=".4g"))
    short = [r for r in rows if args.medium and r[0] == "torch-single" and r[1] == "medium"
             and not (r[UTIL] != "" and r[UTIL] >= 100 * MEDIUM_TARGET)]
    if short:
        sys.exit(f"torch-single under {MEDIUM_TARGET:.0%} of its peak at --preset medium: "
                 f"{', '.join(r[2] for r in short)}")


if __name__ == "__main__":
    main()
