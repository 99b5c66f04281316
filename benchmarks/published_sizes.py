"""The published sizes (--preset gpt2-small, vit-b16, resnet50) on every backend: throughput,
memory per device and MFU, read from each run's record. The table the first GPU machine should
publish, and on a CPU what one step of each costs.

    python benchmarks/published_sizes.py [--presets P ...] [--backends B ...] [--devices 1 8]
                                         [--precision bf16] [--steps 10] [--out DIR]

On a GPU machine (the default there): every installed backend, the single-device ones at 1
GPU and the data-parallel ones at 1 and at every GPU, in bf16, at PER_DEVICE_BATCH (fewer where
the random data's 256 rows would not hold a global batch). MFU is the record's: model FLOPs per
second per device over the datasheet's dense peak for the dtype (parbench.run.datasheet).

On a CPU: each framework's single-device backend in float32 at CPU_BATCH, the step's time and
the process's peak memory; no MFU (no datasheet peak for a CPU). Run it on a quiet machine.

Each case is a plain ``parbench run``; a failed one (out of memory, a refusal) is a row with
its status and last error line, not the end of the table. With ``--out`` the records stay.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tabulate import tabulate

from parbench.base.devices import gpu_count
from parbench.contract.data import RANDOM_IMAGES
from parbench.contract.language import RANDOM_WINDOWS
from parbench.contract.tasks import PUBLISHED
from parbench.run.registry import BACKENDS

# rows per device on a GPU: GPT-2 small's 8 rows are 8192 tokens
PER_DEVICE_BATCH = {"gpt2-small": 8, "vit-b16": 64, "resnet50": 128}
CPU_BATCH = {"gpt2-small": 1, "vit-b16": 2, "resnet50": 2}
DATA_ROWS = min(RANDOM_IMAGES["train"], RANDOM_WINDOWS["train"])  # a global batch's limit
HEADERS = ("preset", "backend", "devices", "dtype", "global batch", "step ms", "items/s",
           "peak MB per device", "MFU %", "status")


@dataclass(frozen=True)
class Case:
    preset: str
    backend: str
    devices: int
    batch: int  # per device
    precision: str

    def options(self, steps: int) -> list[str]:
        devices = ["--devices", str(self.devices)] if BACKENDS[self.backend].parallel else []
        return ["--preset", self.preset, "--steps", str(steps), "--precision", self.precision,
                "--per-device-batch", str(self.batch), *devices]


def cases(presets: list[str], backends: list[str], devices: list[int], precision: str,
          gpus: int) -> list[Case]:
    """Single-device backends at 1 device, the others at each count in ``devices``; on a CPU
    (``gpus`` 0) single-device backends only, at CPU_BATCH."""
    found = []
    for preset in presets:
        for backend in backends:
            parallel = BACKENDS[backend].parallel
            if not gpus:
                if not parallel:
                    found.append(Case(preset, backend, 1, CPU_BATCH[preset], precision))
                continue
            for count in (devices if parallel else [1]):
                batch = min(PER_DEVICE_BATCH[preset], DATA_ROWS // count)
                found.append(Case(preset, backend, count, batch, precision))
    return found


def row(case: Case, record: dict | None, error: str) -> list:
    """A table row from a run's record (None: the run left none)."""
    head = [case.preset, case.backend, case.devices, case.precision, case.batch * case.devices]
    if record is None or record["status"] != "ok":
        status = "no record" if record is None else record["status"]
        last = (record or {}).get("error") or error
        return [*head, "", "", "", "", f"{status}: {last.strip().splitlines()[-1][:80]}"
                if last else status]
    metrics = record["metrics"]
    memory = metrics.get("peak_device_mb") or metrics.get("peak_rss_mb") or []
    mfu = metrics["flops"].get("mfu")
    return [*head, metrics["step_time_ms"]["median"], metrics["throughput"],
            max(memory) if memory else "", "" if mfu is None else 100 * mfu, "ok"]


def run(case: Case, steps: int, out: Path) -> list:
    folder = out / f"{case.preset}-{case.backend}-n{case.devices}"
    done = subprocess.run([sys.executable, "-m", "parbench.cli", "run", case.backend,
                           *case.options(steps), "--out", str(folder)],
                          capture_output=True, text=True)
    records = [json.loads(path.read_text()) for path in folder.glob("*.json")]
    return row(case, records[0] if records else None, done.stderr)


def main(argv: list[str] | None = None) -> int:
    gpus = gpu_count()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", nargs="+", default=list(PUBLISHED), choices=PUBLISHED,
                        metavar="PRESET", help=f"some of {', '.join(PUBLISHED)} (all)")
    parser.add_argument("--backends", nargs="+", choices=list(BACKENDS), metavar="BACKEND",
                        help="default: every backend that can run here")
    parser.add_argument("--devices", nargs="+", type=int,
                        default=sorted({1, gpus}) if gpus else [1])
    parser.add_argument("--precision", choices=("fp32", "bf16", "fp16"),
                        default="bf16" if gpus else "fp32")
    parser.add_argument("--steps", type=int, default=10 if gpus else 3)
    parser.add_argument("--out", type=Path, help="keep the records here")
    args = parser.parse_args(argv)
    if any(count < 1 or count > max(gpus, 1) for count in args.devices):
        parser.error(f"--devices: between 1 and {max(gpus, 1)} here")
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")
    backends = args.backends or [name for name, backend in BACKENDS.items()
                                 if backend.missing_reason() is None]
    planned = cases(args.presets, backends, args.devices, args.precision, gpus)
    with tempfile.TemporaryDirectory() as scratch:
        out = args.out or Path(scratch)
        rows = []
        for number, case in enumerate(planned, 1):
            print(f"published_sizes {number}/{len(planned)}: {case.preset} {case.backend} "
                  f"x{case.devices}", file=sys.stderr, flush=True)
            rows.append(run(case, args.steps, out))
    print(tabulate(rows, headers=HEADERS, tablefmt="github", floatfmt=".4g"))
    return 0 if all(r[-1] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
