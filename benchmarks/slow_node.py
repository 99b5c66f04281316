"""A slow node, and where it shows: two loopback "nodes" of a multi-node run, once as equals and
once with node 1 sharing its core with a busy process, alternated (A B A B).

Each node is its own ``parbench run --nnodes 2`` pinned to one core (node 0 on CPU 0, node 1 on
CPU 1, one thread each). Prints, from node 0's records, each node's step time, the time it took
to score its part of the test set and its data wait (``metrics.nodes``): in lockstep data
parallelism the step time is the same on both nodes whatever happens, and the slow node stands
out in the other two.

    python benchmarks/slow_node.py [--backend torch-ddp] [--repeats 2] [--out DIR] \
        > results/claims/slow-node.md

The records go to --out (default: a temporary folder, removed at the end): the busy runs are
busy on purpose, so they are kept out of results/.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from claims import settle
from tabulate import tabulate

from parbench.base.ports import free_port

BUSY = [sys.executable, "-c", "while True: pass"]
TRAINING = ["--devices", "1", "--threads", "1", "--steps", "30", "--global-batch", "64"]


def two_nodes(backend: str, out: Path, args: list[str], pinned: bool = False) -> dict:
    """One run of two loopback nodes (each pinned to its own core if ``pinned``); node 0's
    record (node 1 prints its part and writes none)."""
    port = free_port()
    nodes = [subprocess.Popen([*(["taskset", "-c", str(rank)] if pinned else []),
                               sys.executable, "-m", "parbench.cli", "run", backend, "--nnodes",
                               "2", "--node-rank", str(rank), "--master", f"127.0.0.1:{port}",
                               *args, "--out", str(out)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for rank in (0, 1)]
    errors = [node.communicate()[1] for node in nodes]
    if any(node.returncode for node in nodes):
        sys.exit(f"a node failed:\n{errors[0][-2000:]}\n{errors[1][-2000:]}")
    (saved,) = [line.split(": ", 1)[1] for line in errors[0].splitlines()
                if line.startswith("ok: ")]  # node 0 names the record it wrote
    return json.loads(Path(saved).read_text())


def busy_core_run(backend: str, out: Path, busy_node_1: bool) -> dict:
    hog = subprocess.Popen(["taskset", "-c", "1", *BUSY]) if busy_node_1 else None
    try:
        return two_nodes(backend, out, TRAINING, pinned=True)
    finally:
        if hog:
            hog.kill()
            hog.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="torch-ddp")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", help="keep the records here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        rows = measure(args.backend, Path(args.out or scratch), args.repeats)
    print(f"{args.backend}, 2 nodes x 1 device on loopback, one core and one thread per node, "
          f"{TRAINING[5]} steps, A B alternated:\n")
    print(tabulate(rows, headers=("case", "repeat", "node", "step ms p50", "scoring s",
                                  "data wait ms"), tablefmt="github", floatfmt=".3g"))


def measure(backend: str, out: Path, repeats: int) -> list[list]:
    rows = []
    for repeat in range(repeats):
        for busy in (False, True):
            label = "node 1 shares its core with a busy process" if busy else "equal nodes"
            settle()
            record = busy_core_run(backend, out / f"{'busy' if busy else 'equal'}-r{repeat}",
                                   busy)
            for node in record["metrics"]["nodes"]:
                rows.append([label, repeat, node["node"], node["step_time_ms"]["median"],
                             node["score_s"], node["data_wait_ms"]])
    return rows


if __name__ == "__main__":
    main()
