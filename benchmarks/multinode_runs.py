"""The reference multi-node rows: per framework, its single backend on 1 device, its multi-node
backend on 1 node x 2 devices and on 2 loopback nodes x 1 device, in rounds (A B C A B C), one
thread per worker everywhere, so the three layouts differ only in how the processes meet.

    python benchmarks/multinode_runs.py [--rounds 2] [--out results/reference/multinode-runs]
    parbench report results/reference/multinode-runs > results/reference/multinode-report.md

Each round writes into its own subfolder (the records of one configuration share a name).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from claims import settle
from slow_node import two_nodes

LAYOUTS = {"torch": ("torch-single", "torch-ddp"), "tensorflow": ("tf-single", "tf-multiworker"),
           "paddle": ("paddle-single", "paddle-launch")}
TRAINING = ["--threads", "1", "--steps", "60"]


def one_node(backend: str, devices: int, out: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "parbench.cli", "run", backend, "--devices",
                           str(devices), *TRAINING, "--out", str(out)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode:
        sys.exit(f"{backend} x{devices} failed:\n{done.stderr[-2000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default="results/reference/multinode-runs")
    args = parser.parse_args()
    for round_ in range(args.rounds):
        out = Path(args.out) / f"round{round_}"
        for single, parallel in LAYOUTS.values():
            for run in (lambda: one_node(single, 1, out), lambda: one_node(parallel, 2, out),
                        lambda: two_nodes(parallel, out, ["--devices", "1", *TRAINING])):
                settle()
                run()
            print(f"round {round_}: {single}, {parallel} done", file=sys.stderr)


if __name__ == "__main__":
    main()
