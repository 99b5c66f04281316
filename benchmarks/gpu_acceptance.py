"""What only GPUs can show, checked on a machine that has them (``gpu_acceptance.sh`` runs this).

Every installed backend x model {resnet, gpt} x {fp32, bf16, fp16} x {eager, compile} x
{1, 2 devices} at a few steps, plus ``--sync-bn`` on the multi-process backends (the resnet's:
the GPT has no BatchNorm), each through ``parbench run`` like a user.
A configuration parbench refuses (exit 2, one line) is listed with its reason, not failed,
unless it is one the GPU must run (Paddle AMP, synchronized BatchNorm). For every run it checks:

* the run is ok and ``metrics.compute_dtype`` is the precision's (Paddle AMP in effect);
* ``--compile`` compiled at least one graph;
* ``peak_device_mb`` is present, one value per device, each > 0;
* the collectives ran on NCCL (torch/Paddle process group, TF cross-device ops);
* each rank drove its own GPU (no two ranks on one device);
* nn.DataParallel's device 0 holds more memory than device 1 (the loss and the optimizer
  live there), so the imbalance the report shows is real;
* a sharded backend (torch-fsdp, jax-fsdp, paddle-sharding, the GPU-only one) holds about 1/N
  of the optimizer state on each rank.

Exits 1 with the list of failed checks, 0 when all passed; without GPUs it says so and exits 0
without running anything.

    benchmarks/gpu_acceptance.sh [--steps 6] [--out DIR] [--backends torch-ddp ...]
                                 [--models resnet gpt]

The 106 resnet cases took about an hour on two GPUs (most of it process start-up and
compilation); the GPT adds as many cases less the --sync-bn ones.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from itertools import product
from pathlib import Path

from parbench.base.devices import gpu_count
from parbench.run.modes import COMPUTE_DTYPES, PRECISIONS
from parbench.run.registry import BACKENDS, Backend

EXIT_USAGE = 2
MUST_RUN_ON_GPU = ("--precision", "--sync-bn")  # refused on CPU only: a refusal here fails


def configurations(gpus: int, names: list[str],
                   models: list[str]) -> list[tuple[Backend, int, list[str]]]:
    """(backend, devices, extra options) of every case this machine can hold, for the named
    backends (default: every installed one) and models."""
    cases = []
    chosen = [BACKENDS[n] for n in names] if names else list(BACKENDS.values())
    for backend in (b for b in chosen if b.missing_reason() is None):
        counts = [n for n in (1, 2) if n <= gpus and (n == 1 or backend.parallel)]
        for model, devices, precision, compiled in product(models, counts, PRECISIONS,
                                                           (False, True)):
            extra = ["--model", model, "--precision", precision] + \
                (["--compile"] if compiled else [])
            cases.append((backend, devices, extra))
        if backend.parallel and not backend.one_process and gpus >= 2 and "resnet" in models:
            cases.append((backend, 2, ["--model", "resnet", "--sync-bn"]))
    return cases


def run(backend: Backend, devices: int, extra: list[str], out: Path,
        steps: int) -> tuple[int, str, dict | None]:
    """(exit code, stderr, the record or None) of one ``parbench run``."""
    folder = out / f"{backend.name}-n{devices}-{'-'.join(o.strip('-') for o in extra)}"
    done = subprocess.run([sys.executable, "-m", "parbench.cli", "run", backend.name,
                           "--devices", str(devices), "--steps", str(steps), "--global-batch",
                           "64", "--out", str(folder), *extra],
                          capture_output=True, text=True, timeout=1800)
    records = sorted(folder.glob("*.json")) if folder.is_dir() else []
    record = json.loads(records[0].read_text()) if records else None
    return done.returncode, done.stderr, record


def problems(record: dict, extra: list[str]) -> list[str]:
    """Every GPU-only fact the record gets wrong."""
    if record["status"] != "ok":
        return [f"{record['status']}: {(record['error'] or '').splitlines()[0]}"]
    found, metrics, env = [], record["metrics"], record["env"]
    precision = record["modes"]["precision"]
    if metrics["compute_dtype"] != COMPUTE_DTYPES[precision]:
        found.append(f"computed in {metrics['compute_dtype']}, asked {precision}")
    if "--compile" in extra and not metrics["compiled_graphs"]:
        found.append("compiled no graph")
    peaks, world = metrics["peak_device_mb"], record["world_size"]
    if not peaks or len(peaks) != world or min(peaks) <= 0:
        found.append(f"peak_device_mb {peaks} is not one positive value per device")
    found += _collectives(record, env)
    if record["backend"] == "torch-dp" and world > 1 and peaks and peaks[0] <= peaks[1]:
        found.append(f"DataParallel device 0 holds no more memory than device 1: {peaks}")
    if BACKENDS[record["backend"]].sharded and world > 1:
        found += _sharded_state(metrics["state_bytes"], world)
    return found


def _sharded_state(held: list[dict] | None, world: int) -> list[str]:
    """A sharded backend's ranks each hold about 1/N of the optimizer state (every ZeRO level
    and FSDP shard it)."""
    if not held:
        return ["no state_bytes in the record"]
    moments = [device["optimizer"] for device in held]
    if max(moments) > (1 / world + 0.05) * sum(moments):
        return [f"optimizer state per rank {moments}: not sharded over {world} ranks"]
    return []


def _collectives(record: dict, env: dict) -> list[str]:
    if record["world_size"] < 2:
        return []
    used = " ".join(str(env.get(k)) for k in ("process_group", "cross_device_ops",
                                              "communication"))
    found = [] if "nccl" in used.lower() else [f"collectives not on NCCL ({used})"]
    gpus = env.get("gpus") or []
    if len(set(gpus)) != record["world_size"]:
        found.append(f"{record['world_size']} devices on GPUs {gpus}: not one GPU each")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--out", type=Path, help="keep the records here (default: a temp dir)")
    parser.add_argument("--backends", nargs="*", default=[], choices=list(BACKENDS),
                        metavar="BACKEND", help="only these backends (default: all installed)")
    parser.add_argument("--models", nargs="*", default=["resnet", "gpt"],
                        choices=["resnet", "gpt"], help="the image model, the language model "
                        "(default: both)")
    args = parser.parse_args()
    gpus = gpu_count()
    if not gpus:
        print("gpu_acceptance: no NVIDIA GPU here; nothing was run (this check needs GPUs)")
        return 0
    if gpus < 2:
        print(f"gpu_acceptance: {gpus} GPU: only the 1-device cases can run here")
    failures = []
    with tempfile.TemporaryDirectory(prefix="parbench-gpu-") as tmp:
        out = args.out or Path(tmp)
        for backend, devices, extra in configurations(gpus, args.backends, args.models):
            case = f"{backend.name} x{devices} {' '.join(extra)}"
            code, stderr, record = run(backend, devices, extra, out, args.steps)
            if code == EXIT_USAGE and record is None:
                reason = stderr.strip().splitlines()[-1] if stderr.strip() else "?"
                # a mode a backend was never run with is refused on GPUs too, with that reason
                must = any(opt in reason for opt in MUST_RUN_ON_GPU) and \
                    "not verified" not in reason
                print(f"{'FAIL' if must else 'refused'} {case}: {reason}")
                failures += [f"{case}: refused on GPU: {reason}"] if must else []
                continue
            found = problems(record, extra) if record else [f"no record (exit {code})"]
            print(f"{'FAIL' if found else 'ok'} {case}" + (f": {'; '.join(found)}"
                                                         if found else ""))
            failures += [f"{case}: {p}" for p in found]
    print(f"\n{len(failures)} failed check(s)" + "".join(f"\n- {f}" for f in failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
