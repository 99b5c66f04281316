"""Measures the claims users ask about, with torch on this machine, and prints Markdown tables:

1. one device vs N devices at the same global batch vs at the same per-device batch (a larger
   effective batch), with and without linear lr scaling: throughput and final accuracy;
2. BatchNorm statistics per replica vs one device: the loss-curve gap between 1 and N devices
   with and without BatchNorm (without it the runs are the same computation);
3. DataParallel vs DDP: what a CPU can show;
4. modes (--sections modes): what bf16, fp16 and compilation change per framework (speed,
   first-step time, accuracy), and how --sync-bn and --grad-accum make 2 devices train like 1.

    python benchmarks/claims.py [--repeats 3] [--out results/claims/runs] > results/claims/claims.md
    python benchmarks/claims.py --sections modes --repeats 2 > results/claims/modes.md
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from tabulate import tabulate

from parbench.base.devices import cpu_count
from parbench.launch.config import RunConfig
from parbench.launch.harness import Prepared, prepare, run_once
from parbench.results.records import write_record
from parbench.run.modes import modes_of

SETTLE_LIMIT_S = 120


def settle() -> None:
    """Wait (at most SETTLE_LIMIT_S) until the 1-minute load average is below the cores runs
    may use: it still holds the previous run for a minute, and a record that starts above it
    reads as measured on a busy machine even when nothing else ran (``env.other_cpu_s``)."""
    deadline = time.monotonic() + SETTLE_LIMIT_S
    while os.getloadavg()[0] >= cpu_count() and time.monotonic() < deadline:
        time.sleep(2)


def settled_run(prepared: Prepared, repeat: int) -> dict:
    settle()
    return run_once(prepared, repeat)


def measure(out: Path, repeats: int, **settings) -> list[dict]:
    cfg = RunConfig.of(out=str(out), **settings)
    with tempfile.TemporaryDirectory() as shared:
        prepared = prepare(cfg, Path(shared))
        records = [settled_run(prepared, r) for r in range(repeats)]
    for record in records:
        write_record(out, record)
        if record["status"] != "ok":
            sys.exit(f"{settings}: {record['status']}\n{record['error']}")
    return records


def median(records: list[dict], get) -> float:
    return float(np.median([get(r["metrics"]) for r in records]))


def batch_claims(out: Path, repeats: int) -> str:
    rows = []
    for label, settings in (
            ("1 device, global batch 128", dict(backend="torch-single")),
            ("2 devices, same global batch 128", dict(backend="torch-ddp", devices=2)),
            ("2 devices, per-device batch 128 (global 256)",
             dict(backend="torch-ddp", devices=2, per_device_batch=128)),
            ("2 devices, per-device 128, linear lr scaling (lr 0.2)",
             dict(backend="torch-ddp", devices=2, per_device_batch=128, lr_scaling="linear"))):
        runs = measure(out, repeats, **settings)
        rows.append([label, runs[0]["steps"], runs[0]["lr"],
                     median(runs, lambda m: m["throughput"]),
                     median(runs, lambda m: m["final_accuracy"]),
                     median(runs, lambda m: m["final_loss"])])
    return tabulate(rows, headers=("configuration (torch, resnet, 2 epochs)", "steps", "lr",
                                   "samples/s", "accuracy", "loss"),
                    tablefmt="github", floatfmt=".4g")


def batchnorm_claims(out: Path) -> str:
    rows = []
    for model in ("resnet-nonorm", "resnet"):
        # lr 0.02: without normalisation the default lr 0.1 diverges to NaN
        single = measure(out, 1, backend="torch-single", model=model, lr=0.02)[0]["metrics"]
        ddp = measure(out, 1, backend="torch-ddp", devices=2, model=model,
                      lr=0.02)[0]["metrics"]
        gap = np.abs(np.subtract(single["loss_curve"], ddp["loss_curve"])).max()
        rows.append([model, gap, single["final_accuracy"], ddp["final_accuracy"]])
    return tabulate(rows, headers=("model (lr 0.02)", "max loss-curve gap, 1 vs 2 devices",
                                   "accuracy 1 device", "accuracy 2 devices"),
                    tablefmt="github", floatfmt=".3g")


def dataparallel_claims(out: Path, repeats: int) -> str:
    rows = []
    for label, settings in (("torch-single", dict(backend="torch-single")),
                            ("torch-dp, 1 device (no-op on CPU)", dict(backend="torch-dp",
                                                                      devices=1)),
                            ("torch-ddp, 2 processes", dict(backend="torch-ddp", devices=2))):
        runs = measure(out, repeats, **settings)
        rows.append([label, median(runs, lambda m: m["throughput"]),
                     median(runs, lambda m: m["step_time_ms"]["median"]),
                     "; ".join(runs[0]["notes"]) or "-"])
    return tabulate(rows, headers=("backend", "samples/s", "step ms", "notes"),
                    tablefmt="github", floatfmt=".4g")


# Each framework's single backend in each mode it can run on CPU (Paddle AMP is GPU-only).
MODE_CASES = (("torch-single", {}), ("torch-single", {"precision": "bf16"}),
              ("torch-single", {"precision": "fp16"}), ("torch-single", {"compile": True}),
              ("tf-single", {}), ("tf-single", {"precision": "bf16"}),
              ("tf-single", {"precision": "fp16"}), ("tf-single", {"compile": True}),
              ("paddle-single", {}), ("paddle-single", {"compile": True}))


def round_robin(out: Path, repeats: int, cases: list[dict]) -> list[list[dict]]:
    """Every case's records, the cases alternated (A B A B) so a drift in the machine's speed
    spreads over all of them instead of landing on one."""
    with tempfile.TemporaryDirectory() as shared:
        prepared = [prepare(RunConfig.of(out=str(out), **case), Path(shared) / str(i))
                    for i, case in enumerate(cases)]
        records: list[list[dict]] = [[] for _ in cases]
        for repeat in range(repeats):
            for i, configuration in enumerate(prepared):
                record = settled_run(configuration, repeat)
                write_record(out, record)
                if record["status"] != "ok":
                    sys.exit(f"{cases[i]}: {record['status']}\n{record['error']}")
                records[i].append(record)
    return records


def precision_compile_claims(out: Path, repeats: int) -> str:
    cases = [{"backend": backend, **modes} for backend, modes in MODE_CASES]
    rows = []
    for case, runs in zip(cases, round_robin(out, repeats, cases)):
        metrics = runs[0]["metrics"]
        rows.append([case["backend"], modes_of(runs[0]).label, metrics["compute_dtype"],
                     metrics["compiled_graphs"] or "-", median(runs, lambda m: m["throughput"]),
                     median(runs, lambda m: m["step_time_ms"]["median"]),
                     median(runs, lambda m: m["first_step_s"]),
                     median(runs, lambda m: m["final_accuracy"]),
                     median(runs, lambda m: m["final_loss"])])
    return tabulate(rows, headers=("backend (resnet, 2 epochs)", "mode", "computed in",
                                   "graphs", "samples/s", "step ms", "first step s",
                                   "accuracy", "loss"), tablefmt="github", floatfmt=".4g")


def loss_gap(a: dict, b: dict) -> float:
    return float(np.abs(np.subtract(a["metrics"]["loss_curve"],
                                    b["metrics"]["loss_curve"])).max())


def sync_bn_claims(out: Path) -> str:
    """tf-mirrored and tf-multiworker on 2 devices against tf-single, BatchNorm resnet, with
    and without --sync-bn (the only framework whose synchronized BatchNorm runs on CPU)."""
    budget = {"model": "resnet", "steps": 10, "global_batch": 64}
    single = measure(out, 1, backend="tf-single", **budget)[0]
    rows = []
    for backend in ("tf-mirrored", "tf-multiworker"):
        for sync in (False, True):
            run = measure(out, 1, backend=backend, devices=2, sync_bn=sync, **budget)[0]
            rows.append([backend, "yes" if sync else "no", run["metrics"]["sync_bn_layers"],
                         loss_gap(single, run)])
    return tabulate(rows, headers=("2 devices vs tf-single (resnet, 10 steps, batch 64)",
                                   "--sync-bn", "synchronized layers", "max loss-curve gap"),
                    tablefmt="github", floatfmt=".3g")


ACCUMULATION = (("torch-single", "torch-ddp"), ("tf-single", "tf-mirrored"),
                ("paddle-single", "paddle-spawn"))


def grad_accum_claims(out: Path) -> str:
    """1 device with --grad-accum 2 against 2 devices without, per framework: the no-norm
    model (the same computation) and the BatchNorm one (micro-batches normalise like shards)."""
    rows = []
    for model in ("resnet-nonorm", "resnet"):
        budget = {"model": model, "dataset": "digits", "steps": 10, "global_batch": 32,
                  "schedule": "constant", "lr": 0.02}
        for single, parallel in ACCUMULATION:
            two = measure(out, 1, backend=parallel, devices=2, **budget)[0]
            plain = measure(out, 1, backend=single, **budget)[0]
            accumulated = measure(out, 1, backend=single, grad_accum=2, **budget)[0]
            rows.append([model, f"{single} vs {parallel} x2", loss_gap(plain, two),
                         loss_gap(accumulated, two)])
    return tabulate(rows, headers=("model (digits, 10 steps, batch 32)", "compared",
                                   "max loss gap, 1 device", "max loss gap, 1 device accum 2"),
                    tablefmt="github", floatfmt=".3g")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("results/claims/runs"))
    parser.add_argument("--sections", choices=("batch", "modes"), default="batch",
                        help="batch: sections 1-3 (torch); modes: section 4 (all frameworks)")
    args = parser.parse_args()
    if args.sections == "modes":
        print("## Precision and compilation\n\n" + precision_compile_claims(args.out,
                                                                           args.repeats))
        print("\n## Synchronized BatchNorm\n\n" + sync_bn_claims(args.out))
        print("\n## Gradient accumulation\n\n" + grad_accum_claims(args.out))
        return
    print("## Batch size and device count\n\n" + batch_claims(args.out, args.repeats))
    print("\n## BatchNorm statistics per replica\n\n" + batchnorm_claims(args.out))
    print("\n## DataParallel vs DistributedDataParallel on CPU\n\n"
          + dataparallel_claims(args.out, args.repeats))


if __name__ == "__main__":
    main()
