"""Measures the claims users ask about, with torch on this machine, and prints Markdown tables:

1. one device vs N devices at the same global batch vs at the same per-device batch (a larger
   effective batch), with and without linear lr scaling: throughput and final accuracy;
2. BatchNorm statistics per replica vs one device: the loss-curve gap between 1 and N devices
   with and without BatchNorm (without it the runs are the same computation);
3. DataParallel vs DDP: what a CPU can show.

    python benchmarks/claims.py [--repeats 3] [--out results/claims/runs] > results/claims/claims.md
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
from tabulate import tabulate

from parbench.config import RunConfig
from parbench.harness import prepare, run_once
from parbench.results import write_record


def measure(out: Path, repeats: int, **settings) -> list[dict]:
    cfg = RunConfig(out=str(out), **settings)
    with tempfile.TemporaryDirectory() as shared:
        prepared = prepare(cfg, Path(shared))
        records = [run_once(prepared, r) for r in range(repeats)]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("results/claims/runs"))
    args = parser.parse_args()
    print("## Batch size and device count\n\n" + batch_claims(args.out, args.repeats))
    print("\n## BatchNorm statistics per replica\n\n" + batchnorm_claims(args.out))
    print("\n## DataParallel vs DistributedDataParallel on CPU\n\n"
          + dataparallel_claims(args.out, args.repeats))


if __name__ == "__main__":
    main()
