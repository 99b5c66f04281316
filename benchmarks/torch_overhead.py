"""Harness overhead: the same model and batches in a bare torch loop vs `parbench run
torch-single`, steady-state step time side by side, alternating rounds so drift hits both.
Both sides run in a fresh process with the same thread settings (the harness exports
OMP_NUM_THREADS and friends to its workers), so only the harness differs.

    python benchmarks/torch_overhead.py [--steps 60] [--rounds 3] [--threads 2]

Prints the median step time of each side and the overhead in percent (target: at most 2%).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from parbench.batches import schedule
from parbench.data import load_synthetic
from parbench.frameworks.torch.model import build_model
from parbench.optim import OptimizerSpec, lr_at
from parbench.results import warmup_steps
from parbench.spec import build_spec
from parbench.weights import initial_weights

BATCH = 128


def bare_loop(steps: int, threads: int) -> float:
    """Median steady-state step time (ms) of the plainest loop that trains the same thing."""
    torch.set_num_threads(threads)
    data = load_synthetic()
    spec = build_spec("resnet", data.input_shape, data.num_classes)
    model = build_model(spec, initial_weights(spec, 0))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    times = []
    for step in schedule(0, len(data.y_train), BATCH, steps):
        x = torch.from_numpy(data.x_train[step.indices])
        y = torch.from_numpy(data.y_train[step.indices])
        optimizer.param_groups[0]["lr"] = lr_at(step.index, steps, OptimizerSpec())
        start = time.perf_counter()
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        loss.item()
        times.append(time.perf_counter() - start)
    return float(np.median(times[warmup_steps(steps):]) * 1000)


def bare_in_fresh_process(steps: int, threads: int) -> float:
    env = {**os.environ, **{name: str(threads) for name in
                            ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}}
    done = subprocess.run([sys.executable, __file__, "--bare-child", "--steps", str(steps),
                           "--threads", str(threads)], check=True, capture_output=True,
                          text=True, env=env)
    return float(done.stdout)


def through_parbench(steps: int, threads: int) -> float:
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([sys.executable, "-m", "parbench.cli", "run", "torch-single",
                        "--steps", str(steps), "--global-batch", str(BATCH), "--threads",
                        str(threads), "--out", out], check=True, capture_output=True)
        (record,) = [json.loads(p.read_text()) for p in Path(out).glob("*.json")]
    return record["metrics"]["step_time_ms"]["median"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--bare-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare_child:
        print(bare_loop(args.steps, args.threads))
        return
    bare, harness = [], []
    for _ in range(args.rounds):
        bare.append(bare_in_fresh_process(args.steps, args.threads))
        harness.append(through_parbench(args.steps, args.threads))
    b, h = float(np.median(bare)), float(np.median(harness))
    print(f"bare torch loop   : {b:.2f} ms/step (rounds: {', '.join(f'{v:.2f}' for v in bare)})")
    print(f"parbench run      : {h:.2f} ms/step (rounds: {', '.join(f'{v:.2f}' for v in harness)})")
    print(f"harness overhead  : {100 * (h - b) / b:+.2f}% (target <= 2%)")


if __name__ == "__main__":
    main()
