"""Measures what each framework's own input pipeline changes (``--input native``), and prints
Markdown tables:

1. speed: every single backend and the 2-device data-parallel backends, arrays against native
   (and torch with 2 loader workers), alternated A B A B: samples/s, step time, the share of
   time the steps waited for their batch, and the final accuracy (the order of the samples
   differs, so accuracy may too);
2. sample accounting on an uneven dataset (4095 training rows, global batch 64, 1 epoch):
   what each loader trained on, duplicated and never showed, the figures of docs/porting.md's
   section 15.0 table.

    python benchmarks/input_claims.py [--repeats 2] > results/claims/input.md
"""

from __future__ import annotations

import argparse
from pathlib import Path

from claims import measure, median, round_robin
from tabulate import tabulate

from parbench.run.modes import modes_of

PARALLEL = ("torch-ddp", "tf-mirrored", "tf-mirrored-keras", "tf-multiworker", "paddle-spawn",
            "paddle-launch")
SINGLE = ("torch-single", "tf-single", "paddle-single")
SPEED_CASES = [
    *({"backend": b, "input": i} for b in SINGLE for i in ("arrays", "native")),
    {"backend": "torch-single", "input": "native", "loader_workers": 2},
    *({"backend": b, "devices": 2, "input": i} for b in ("torch-ddp", "tf-mirrored",
                                                         "paddle-spawn")
      for i in ("arrays", "native")),
    # workers started by the 'spawn' method (mp.spawn's and paddle.distributed.spawn's
    # children) against forked ones (torchrun's children)
    *({"backend": b, "devices": 2, "input": "native", "loader_workers": 2, **launcher}
      for b, launcher in (("torch-ddp", {}), ("torch-ddp", {"launcher": "spawn"}),
                          ("paddle-spawn", {}))),
]
UNEVEN = {"train_subset": 4095, "global_batch": 64, "epochs": 1}


def speed_claims(out: Path, repeats: int) -> str:
    rows = []
    budget = {"epochs": 1}
    cases = [{**case, **budget} for case in SPEED_CASES]
    for case, runs in zip(cases, round_robin(out, repeats, cases)):
        modes = modes_of(runs[0])
        rows.append([f"{case['backend']} [{runs[0]['launcher']}]", runs[0]["world_size"],
                     modes.input, modes.loader_workers,
                     median(runs, lambda m: m["throughput"]),
                     median(runs, lambda m: m["step_time_ms"]["median"]),
                     median(runs, lambda m: 100 * m["input"]["wait_share"]),
                     median(runs, lambda m: m["final_accuracy"])])
    return tabulate(rows, headers=("backend (resnet, 1 epoch)", "devices", "input",
                                   "loader workers", "samples/s", "step ms", "data wait %",
                                   "accuracy"), tablefmt="github", floatfmt=".4g")


def uneven_claims(out: Path) -> str:
    rows = []
    cases = [("contract", {"backend": "torch-ddp", "devices": 2, "input": "arrays"}),
             *((b, {"backend": b, "input": "native"}) for b in SINGLE),
             *((b, {"backend": b, "devices": 2, "input": "native"}) for b in PARALLEL)]
    for label, case in cases:
        run = measure(out, 1, **case, **UNEVEN)[0]
        fed = run["metrics"]["input"]
        (epoch,) = [e for e in fed["epochs"] if e["complete"]]
        rows.append([label, run["world_size"], fed["steps_per_epoch"], epoch["samples"],
                     epoch["unique"], epoch["duplicated"], epoch["dropped"],
                     fed["description"]])
    return tabulate(rows, headers=("backend", "devices", "steps per epoch", "samples",
                                   "distinct", "duplicated", "dropped", "loader"),
                    tablefmt="github")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("results/claims/input-runs"))
    args = parser.parse_args()
    print("## Arrays vs each framework's own loader\n\n" + speed_claims(args.out, args.repeats))
    print("\n## What each loader feeds from an uneven dataset\n\n" + uneven_claims(args.out))


if __name__ == "__main__":
    main()
