"""How a step's cost grows with its work, per framework: where each one stops being
overhead-bound.

    python benchmarks/scaling_work.py [--framework torch ...] [--steps 20] [--out DIR]
                                      [--batches 32,64,...] [--widths 32,64,...]

Two sweeps of each installed framework's single backend, every other option the default:
global batch 32 to 512 on the default ResNet, and width 32 to 256 on the GPT (4 heads, MLP 4 x
the width). Each point is one ``parbench run``; its record gives the model FLOPs of one step
(from the spec) and the median steady step time, hence the achieved FLOP/s. Written to DIR
(results/scaling-work): ``points.csv`` (one row per run), ``scaling-work.png`` (step time and
achieved TFLOP/s against model FLOPs per step, log-log, one line per framework and sweep; the
dotted lines are each framework's measured float32 matmul peak, where ``parbench peak`` has
measured it) and ``points.md``, the table printed.

Reading it: a step that is overhead-bound (dispatch, Python, synchronisation, small kernels)
costs about the same whatever its work, so time grows more slowly than work: the table's
``slope`` (d log time / d log work from the previous point) is well under 1 and FLOP/s climbs.
Where slope nears 1, more work costs proportionally more time: the step is compute-bound and
FLOP/s levels off, below the matmul peak by what convolutions and small products lose.
Above 1.1 ("FLOP/s falls") more work runs less efficiently than less did.
Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
from matplotlib import pyplot  # noqa: E402  (after the backend is chosen)
from tabulate import tabulate  # noqa: E402
from timing import run_record  # noqa: E402

from parbench.run.registry import FRAMEWORKS  # noqa: E402

SWEEPS = {  # name: (model, option, default values)
    "resnet batch": ("resnet", "--global-batch", (32, 64, 128, 256, 512)),
    "gpt width": ("gpt", "--width", (32, 64, 128, 256)),
}
OVERHEAD_SLOPE = 0.5  # time grows at most half as fast as work: overhead-bound
COMPUTE_SLOPE = 0.8  # nearly in proportion: compute-bound
FALLING_SLOPE = 1.1  # time grows faster than work: more work is done less efficiently


@dataclass
class Point:
    framework: str
    sweep: str
    value: int
    flops_per_step: int
    step_ms: float
    tflops: float
    peak_tflops: float | None
    slope: float | None = None
    cpu: str = ""


def sweep(framework: str, name: str, values: list[int], steps: int) -> list[Point]:
    model, option, _ = SWEEPS[name]
    points = []
    for value in values:
        print(f"scaling_work: {framework} {name} {value}", file=sys.stderr, flush=True)
        record = run_record(FRAMEWORKS[framework].single, "--model", model, option,
                            str(value), "--steps", str(steps))
        flops = record["metrics"]["flops"]
        points.append(Point(framework, name, value, flops["per_step"],
                            record["metrics"]["step_time_ms"]["median"],
                            flops["achieved_tflops"], flops["measured_peak_tflops"],
                            cpu=record["env"]["cpu_model"]))
    for before, point in zip(points, points[1:]):
        point.slope = (math.log(point.step_ms / before.step_ms)
                       / math.log(point.flops_per_step / before.flops_per_step))
    return points


def regime(slope: float | None) -> str:
    if slope is None:
        return ""
    if slope > FALLING_SLOPE:
        return "FLOP/s falls"
    return ("overhead-bound" if slope < OVERHEAD_SLOPE else
            "compute-bound" if slope >= COMPUTE_SLOPE else "between")


def table(points: list[Point]) -> str:
    rows = [[p.framework, p.sweep, p.value, p.flops_per_step / 1e9, p.step_ms, p.tflops,
             "" if p.slope is None else p.slope, regime(p.slope)] for p in points]
    return tabulate(rows, headers=("framework", "sweep", "value", "GFLOP/step", "step ms",
                                   "TFLOP/s", "slope", "regime"),
                    tablefmt="github", floatfmt=".4g")


def plot(points: list[Point], path: Path) -> None:
    """Step time and achieved TFLOP/s against FLOPs per step, log-log, one line per framework
    (its colour) and sweep (its line style); a framework's matmul peak dotted."""
    figure, (time_ax, speed_ax) = pyplot.subplots(1, 2, figsize=(13, 5))
    colours = dict(zip(dict.fromkeys(p.framework for p in points), pyplot.cm.tab10.colors))
    styles = dict(zip(SWEEPS, ("-o", "--s")))
    for (framework, name), line in _lines(points).items():
        x = [p.flops_per_step for p in line]
        label = f"{framework}, {name}"
        time_ax.plot(x, [p.step_ms for p in line], styles[name], color=colours[framework],
                     label=label)
        speed_ax.plot(x, [p.tflops for p in line], styles[name], color=colours[framework],
                      label=label)
        if line[0].peak_tflops:
            speed_ax.axhline(line[0].peak_tflops, color=colours[framework], linestyle=":")
    for ax, ylabel in ((time_ax, "step time, ms"), (speed_ax, "achieved TFLOP/s")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("model FLOPs per step")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
    speed_ax.legend(loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize="small")
    figure.suptitle(f"Cost against work, single backends ({points[0].cpu}); dotted: "
                    "measured float32 matmul peak")
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def _lines(points: list[Point]) -> dict[tuple[str, str], list[Point]]:
    lines: dict[tuple[str, str], list[Point]] = {}
    for point in points:
        lines.setdefault((point.framework, point.sweep), []).append(point)
    return lines


def _values(text: str) -> list[int]:
    """A comma-separated list of ascending positive whole numbers."""
    try:
        values = [int(value) for value in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: not comma-separated whole numbers") \
            from None
    if min(values) < 1 or values != sorted(set(values)):
        raise argparse.ArgumentTypeError(f"{text!r}: positive and ascending, each once")
    return values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--framework", action="append", choices=tuple(FRAMEWORKS),
                        help="repeatable; default every installed one")
    parser.add_argument("--steps", type=int, default=20, help="steps per run (20)")
    parser.add_argument("--out", type=Path, default=Path("results/scaling-work"))
    for name, flag in zip(SWEEPS, ("--batches", "--widths")):
        parser.add_argument(flag, type=_values, default=list(SWEEPS[name][2]),
                            help=f"the {name} sweep ({','.join(map(str, SWEEPS[name][2]))})")
    args = parser.parse_args()
    if args.steps < 3:
        parser.error(f"--steps {args.steps}: at least 3 (the first is left out of the timing)")
    values = dict(zip(SWEEPS, (args.batches, args.widths)))
    frameworks = args.framework or [name for name, framework in FRAMEWORKS.items()
                                    if framework.missing_reason() is None]
    points = [p for framework in frameworks for name in SWEEPS
              for p in sweep(framework, name, values[name], args.steps)]
    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / "points.csv").open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(asdict(points[0])))
        writer.writeheader()
        writer.writerows(asdict(p) for p in points)
    plot(points, args.out / "scaling-work.png")
    text = table(points)
    (args.out / "points.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
