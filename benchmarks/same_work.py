"""Same work, same speed: every launch path of a framework at one device, on one configuration,
interleaved (A B C A B C), each run in its own `parbench run`. One device means the same
computation on the same cores whatever the path, so any ratio far from 1 is the launch path's
cost (or a defect), not the framework's.

    python benchmarks/same_work.py [--framework F] [--rounds 3] [--steps 40]

Prints each path's median step time (the median over rounds of each run's median) and its ratio
to the framework's single backend, and `ok` or `OUTSIDE` against the band: 0.90-1.10, and
0.80-1.25 for Keras `fit` (its own loop, not parbench's).
"""

from __future__ import annotations

import argparse

import numpy as np
from tabulate import tabulate
from timing import describe_rounds, parbench_run, step_ms

PATHS = {
    "torch": [("torch-single", []), ("torch-dp", ["--devices", "1"]),
              ("torch-ddp", ["--devices", "1", "--launcher", "torchrun"]),
              ("torch-ddp", ["--devices", "1", "--launcher", "spawn"])],
    "tensorflow": [("tf-single", []), ("tf-mirrored", ["--devices", "1"]),
                   ("tf-multiworker", ["--devices", "1"]),
                   ("tf-mirrored-keras", ["--devices", "1"])],
    "paddle": [("paddle-single", []), ("paddle-spawn", ["--devices", "1"]),
               ("paddle-launch", ["--devices", "1"])],
    "jax": [("jax-single", []), ("jax-pmap", ["--devices", "1"]),
            ("jax-sharded", ["--devices", "1"])],
}
BANDS = {"tf-mirrored-keras": (0.80, 1.25)}
DEFAULT_BAND = (0.90, 1.10)


def measure(framework: str, rounds: int, steps: int) -> list[list]:
    """One table row per launch path: name, median ms, the rounds, ratio, verdict."""
    times: dict[int, list[float]] = {i: [] for i in range(len(PATHS[framework]))}
    launchers: dict[int, str] = {}
    for _ in range(rounds):
        for i, (backend, options) in enumerate(PATHS[framework]):
            record = parbench_run(backend, steps, *options)
            times[i].append(step_ms(record))
            launchers[i] = record["launcher"]
    baseline = float(np.median(times[0]))
    rows = []
    for i, (backend, _) in enumerate(PATHS[framework]):
        median = float(np.median(times[i]))
        low, high = BANDS.get(backend, DEFAULT_BAND)
        ratio = median / baseline
        rows.append([f"{backend} ({launchers[i]})", f"{median:.1f}", describe_rounds(times[i]),
                     f"{ratio:.2f}", "ok" if low <= ratio <= high else "OUTSIDE"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", choices=sorted(PATHS), action="append",
                        help="repeatable; default: all four")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    for framework in args.framework or sorted(PATHS):
        rows = measure(framework, args.rounds, args.steps)
        print(tabulate(rows, headers=(framework, "step ms", "rounds", "ratio to single",
                                      "band"), tablefmt="github"), flush=True)
        print()


if __name__ == "__main__":
    main()
