#!/usr/bin/env bash
# The GPU acceptance check, the one command for a machine with GPUs (see gpu_acceptance.py):
# the tests marked gpu (pytest -m gpu: tests/test_gpu.py), every backend x precision x compile
# x devices, plus --sync-bn and the sharded backends against their replicated twins, each
# record put through benchmarks/gpu_checks.py. Run it from the repository root in an
# environment where parbench, its test requirements (pytest) and the CUDA builds of the
# frameworks are installed. Exits 0 without running anything when the machine has no NVIDIA GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python benchmarks/gpu_acceptance.py "$@"
