"""A framework's harness step against its bare step, interleaved in one process: what the
timed region of `parbench run <framework>-single` adds, measured where the machine's noise cancels.

    python benchmarks/overhead_interleaved.py --framework torch|tensorflow|paddle|jax
                                              [--steps 300] [--threads N]

overhead.py compares whole runs in fresh processes, and on a shared 2-core machine the rounds'
medians spread by +-15%, far wider than a 2% bar. Here one process holds two models with the
same weights: the bare loop's (overhead.py's `bare_<framework>`) and the framework's own
single-device strategy (`SingleDevice`, built from a Job as its worker builds it). Each step index
runs both, in an order that alternates (A B, B A, ...), on the same batch; the figure is the median
of the per-step ratios harness / bare after warm-up, with a 95% bootstrap interval. Both models
train the same trajectory, so their losses are compared too: a harness step that computed
something else would show there, not as speed.

What this leaves out, and why that is measured apart: the worker's loop around the step (reading
the next batch, the progress file) is outside the timed region, and the supervising process
used 3 CPU ticks in 10 s of a steady torch-single run (0.3% of one core; read from
/proc/<pid>/task/*/stat), so neither runs beside the timed step long enough to slow it by 2%.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
from overhead import BARE, SINGLE, Step, batches, timed
from timing import MALLOC_SETTINGS, child_env

from parbench.base.devices import cpu_count
from parbench.contract.optim import OptimizerSpec
from parbench.contract.spec import spec_dict
from parbench.contract.weights import save_weights
from parbench.results.metrics import warmup_steps
from parbench.run.job import Job


def harness_step(framework: str, spec, weights, steps: int, threads: int, shared: Path) -> Step:
    """<framework>-single's timed region, its strategy built from a Job as its worker builds it
    (threads, devices, weights, optimizer, step): the strategy's train_step, then synchronize."""
    save_weights(shared / "weights.npz", weights)
    job = Job(backend=SINGLE[framework], launcher="python", world_size=1, threads=threads,
              model=spec_dict(spec), dataset="synthetic", task_fields={"classes": 10},
              task_name="image-classification", global_batch=128, total_steps=steps,
              optimizer=vars(OptimizerSpec()).copy(), seed=0, workdir=str(shared),
              shared=str(shared))
    single = importlib.import_module(f"parbench.frameworks.{framework}.single")
    strategy = single.SingleDevice(job)

    def step(x, y, lr):
        loss = strategy.train_step(x, y, lr)
        strategy.synchronize()
        return loss
    return step


def interleave(framework: str, steps: int, threads: int) -> dict[str, np.ndarray]:
    spec, weights, feed = batches(steps)
    with tempfile.TemporaryDirectory() as shared:
        # the strategy first: TF's thread pools and devices must be set before its first op
        harness = harness_step(framework, spec, weights, steps, threads, Path(shared))
        bare = BARE[framework](spec, weights, threads)
        rows = []
        for index, (x, y, lr) in enumerate(feed):
            order = [(0, bare), (1, harness)]
            results = dict((side, timed(step, x, y, lr))
                           for side, step in (order if index % 2 else order[::-1]))
            rows.append([results[0][0], results[1][0], results[0][1], results[1][1]])
    table = np.asarray(rows)
    return {"bare_s": table[:, 0], "harness_s": table[:, 1], "bare_loss": table[:, 2],
            "harness_loss": table[:, 3]}


def ratio_interval(ratios: np.ndarray, resamples: int = 10_000) -> tuple[float, float]:
    """95% bootstrap interval of the median ratio, in per cent."""
    picks = np.random.default_rng(0).integers(0, len(ratios), (resamples, len(ratios)))
    low, high = np.percentile(np.median(ratios[picks], axis=1), [2.5, 97.5])
    return 100 * (low - 1), 100 * (high - 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", choices=sorted(BARE), required=True)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--threads", type=int, default=cpu_count())
    args = parser.parse_args()
    if args.steps < 20:
        parser.error("--steps must be at least 20 (the first ones are warm-up)")
    if args.threads < 1:
        parser.error("--threads must be at least 1")
    if any(os.environ.get(name) != value for name, value in MALLOC_SETTINGS.items()):
        # the allocator and thread settings the harness gives a worker (timing.child_env), as
        # overhead.py's bare child gets them: without them a step maps and unmaps its memory
        os.execve(sys.executable, [sys.executable, __file__, *sys.argv[1:]],
                  child_env(args.threads))
    run = interleave(args.framework, args.steps, args.threads)
    kept = slice(warmup_steps(args.steps), None)
    bare, harness = run["bare_s"][kept], run["harness_s"][kept]
    ratios = harness / bare
    low, high = ratio_interval(ratios)
    drift = float(np.max(np.abs(run["harness_loss"] - run["bare_loss"])))
    print(f"{args.framework}, {len(ratios)} interleaved steps: bare "
          f"{1000 * np.median(bare):.1f} ms/step, {SINGLE[args.framework]}'s step "
          f"{1000 * np.median(harness):.1f} ms/step, harness overhead "
          f"{100 * (np.median(ratios) - 1):+.1f}% (95% interval {low:+.1f}% to {high:+.1f}%); "
          f"largest loss difference between the two models {drift:.2e}")


if __name__ == "__main__":
    main()
