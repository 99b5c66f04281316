"""What only GPUs can show, checked on a machine that has them: the one command for a lent GPU
machine (``gpu_acceptance.sh`` runs this). It runs the tests marked ``gpu``
(``pytest -m gpu``: tests/test_gpu.py), which make every case through ``parbench run`` like a
user and apply benchmarks/gpu_checks.py to each record.

The cases (gpu_checks.cases): every installed backend x model {resnet, gpt} x {fp32, bf16,
fp16} x {eager, compile} x {1, 2 devices} at a few steps, plus ``--sync-bn`` on the
multi-process backends (the resnet's: the GPT has no BatchNorm) and ``--reshard-after-forward
no`` on the sharded backends that reshard. A configuration parbench refuses (exit 2, one line)
is skipped with its reason, not failed, unless it is one the GPU must run (Paddle AMP,
synchronized BatchNorm). Every record must show, each figure present and positive:

* the run is ok and ``metrics.compute_dtype`` is the precision's (Paddle AMP in effect);
* ``--compile`` compiled at least one graph;
* ``peak_device_mb`` is present, one value per device, each > 0;
* the collectives ran on NCCL (torch/Paddle process group, TF cross-device ops);
* each rank drove its own GPU (no two ranks on one device), a one-device run a GPU at all;
* nn.DataParallel's device 0 holds more memory than device 1 (the loss and the optimizer
  live there), so the imbalance the report shows is real;
* a sharded backend (torch-fsdp, jax-fsdp, paddle-sharding, the GPU-only one) holds on each
  rank a positive share of the optimizer state, at most about 1/N of its replicated twin's
  (torch-ddp, jax-sharded, paddle-launch at the same options), and all of it together.

And each GPU-only backend (paddle-sharding), which CPU parity tests cannot run, trains as its
framework's single device: its 2-device loss curve and final weights within parbench parity's
strategy tolerance of paddle-single's.

Exits with pytest's status: 0 when all passed, 1 with the failed checks listed; without GPUs it
says so and exits 0 without running anything. Needs the test requirements (pytest) beside
parbench and the CUDA builds of the frameworks.

    benchmarks/gpu_acceptance.sh [--steps 6] [--out DIR] [--backends torch-ddp ...]
                                 [--models resnet gpt] [--published] [-- PYTEST ARGS ...]

``--published`` then runs benchmarks/published_sizes.py on the same backends: GPT-2 small,
ViT-B/16 and ResNet-50 at 1 and at every GPU in bf16, the table of throughput, memory per
device and MFU (its records under ``--out``'s ``published/`` when given).

The options reach the tests as environment variables (``ENV``), so ``pytest -m gpu`` with
them set is the same run. What changed from the script this was: the cases are pytest's
(``-- -k paddle`` selects some, ``-- -x`` stops at the first failure), and a refused case is
listed among the skips with its reason.

The 106 resnet cases took about an hour on two GPUs (most of it process start-up and
compilation); the GPT adds as many cases less the --sync-bn ones.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from gpu_checks import MODELS, problems  # noqa: F401  (problems: this script's checks, as before)

from parbench.base.devices import gpu_count
from parbench.run.registry import BACKENDS

ROOT = Path(__file__).resolve().parents[1]
# what tests/test_gpu.py reads: option -> environment variable
ENV = {"steps": "PARBENCH_GPU_STEPS", "out": "PARBENCH_GPU_OUT",
       "backends": "PARBENCH_GPU_BACKENDS", "models": "PARBENCH_GPU_MODELS"}


def parse(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    """The script's options, and what follows ``--``: pytest's."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--out", type=Path, help="keep the records here (default: pytest's "
                        "temporary folders)")
    parser.add_argument("--backends", nargs="*", default=[], choices=list(BACKENDS),
                        metavar="BACKEND", help="only these backends (default: all installed)")
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS),
                        help="the image model, the language model (default: both)")
    parser.add_argument("--published", action="store_true",
                        help="then the published sizes' table (benchmarks/published_sizes.py)")
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER,
                        help="after --: passed to pytest")
    args = parser.parse_args(argv)
    rest = args.pytest_args[1:] if args.pytest_args[:1] == ["--"] else args.pytest_args
    return args, rest


def options_env(args: argparse.Namespace) -> dict[str, str]:
    """The environment that carries the options to tests/test_gpu.py (every one set, an
    empty value meaning the default, so none leaks in from the caller's environment)."""
    values = {"steps": str(args.steps), "out": str(args.out.resolve()) if args.out else "",
              "backends": " ".join(args.backends), "models": " ".join(args.models)}
    return {**os.environ, **{ENV[key]: value for key, value in values.items()}}


def main(argv: list[str] | None = None) -> int:
    args, pytest_args = parse(argv)
    gpus = gpu_count()
    if not gpus:
        print("gpu_acceptance: no NVIDIA GPU here; nothing was run (this check needs GPUs)")
        return 0
    if gpus < 2:
        print(f"gpu_acceptance: {gpus} GPU: only the 1-device cases can run here")
    # -rfEs: the failed checks and every skip (a refusal, a missing backend) with its reason
    checked = subprocess.call([sys.executable, "-m", "pytest", "-m", "gpu", "-rfEs",
                               "-p", "no:cacheprovider", *pytest_args], cwd=ROOT,
                              env=options_env(args))
    if not args.published:
        return checked
    return max(checked, subprocess.call([sys.executable, str(ROOT / "benchmarks" /
                                                             "published_sizes.py"),
                                         *published_options(args)], cwd=ROOT))


def published_options(args: argparse.Namespace) -> list[str]:
    """published_sizes.py's options from this script's: the same backends and records folder
    (its own defaults otherwise: bf16, 1 and every GPU)."""
    backends = ["--backends", *args.backends] if args.backends else []
    out = ["--out", str(args.out.resolve() / "published")] if args.out else []
    return [*backends, *out]


if __name__ == "__main__":
    sys.exit(main())
