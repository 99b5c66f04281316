#!/usr/bin/env bash
# The GPU acceptance check (see gpu_acceptance.py): every backend x precision x compile x
# devices, plus --sync-bn, on this machine's GPUs. Run it from the repository root in an
# environment where parbench and the CUDA builds of the frameworks are installed. Exits 0
# without running anything when the machine has no NVIDIA GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python benchmarks/gpu_acceptance.py "$@"
