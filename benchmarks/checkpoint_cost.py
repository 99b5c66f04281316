"""What a checkpoint costs against a training step, per framework, at the default size and at
``--preset medium``.

    python benchmarks/checkpoint_cost.py [--framework torch ...] [--steps 40] [--every 10]

Each installed framework's representative approach on 2 devices (torch-ddp, tf-mirrored,
paddle-launch, jax-sharded: the registry's ``representative``), at two sizes: the default model
(the ResNet) and ``--preset medium`` (a ViT of width 192 with AdamW, whose optimizer state is
twice its weights). One ``parbench run`` each, with ``--checkpoint-every``; its record gives
the median steady step time and each checkpoint's seconds and bytes, as rank 0 measured them
(the loop writes checkpoints off the step clock, parbench.run.checkpoint). The first
checkpoint of a run is shown apart: it pays one-time costs (importing the checkpoint library,
planning the layout, compiling a copy). ``save / step`` is the median of the later ones over
the median step: how many steps' time one checkpoint costs. Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile

from tabulate import tabulate
from timing import run_record

from parbench.run.registry import FRAMEWORKS

SIZES = {"default": (), "medium": ("--preset", "medium")}


def measure(backend: str, size: str, steps: int, every: int) -> dict:
    """One run's step time and its checkpoints' cost."""
    with tempfile.TemporaryDirectory() as folder:
        record = run_record(backend, "--devices", "2", *SIZES[size], "--steps", str(steps),
                            "--checkpoint-every", str(every),
                            "--checkpoint-dir", folder)
    written = record["checkpoints"]["written"]
    step_ms = record["metrics"]["step_time_ms"]["median"]
    later_ms = statistics.median(1000 * w["save_s"] for w in written[1:])
    return {"framework": record["framework"], "backend": backend, "size": size,
            "MiB": written[-1]["bytes"] / 2**20, "first save ms": 1000 * written[0]["save_s"],
            "save ms": later_ms, "step ms": step_ms, "save / step": later_ms / step_ms}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", action="append", choices=list(FRAMEWORKS))
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--every", type=int, default=10)
    args = parser.parse_args()
    if args.steps < 1 or args.every < 1 or args.steps // args.every < 2:
        parser.error("--steps must hold at least 2 checkpoints of --every steps")
    frameworks = [f for f in (args.framework or FRAMEWORKS)
                  if FRAMEWORKS[f].missing_reason() is None]
    rows = [measure(FRAMEWORKS[f].representative, size, args.steps, args.every)
            for size in SIZES for f in frameworks]
    print(tabulate(rows, headers="keys", tablefmt="github", floatfmt=".3g"))


if __name__ == "__main__":
    main()
