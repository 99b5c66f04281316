"""What the speed benchmarks share: a `parbench run` in a fresh process, read back from its
record, and the median over alternating rounds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from parbench.launch.supervise import MALLOC_SETTINGS

BATCH = 128
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def run_record(backend: str, *options: str) -> dict:
    """One `parbench run BACKEND OPTIONS` in a fresh process; its one record, which must be
    ok (anything else ends the benchmark with the run's stderr)."""
    with tempfile.TemporaryDirectory() as out:
        done = subprocess.run([sys.executable, "-m", "parbench.cli", "run", backend,
                               *options, "--out", out], capture_output=True, text=True)
        records = [json.loads(p.read_text()) for p in Path(out).glob("*.json")]
    if done.returncode != 0 or len(records) != 1 or records[0]["status"] != "ok":
        sys.exit(f"parbench run {backend} {' '.join(options)} failed:\n{done.stderr[-3000:]}")
    return records[0]


def parbench_run(backend: str, steps: int, *options: str) -> dict:
    """One `parbench run` of the default model on the built-in data, global batch BATCH."""
    return run_record(backend, "--steps", str(steps), "--global-batch", str(BATCH), *options)


def step_ms(record: dict) -> float:
    return record["metrics"]["step_time_ms"]["median"]


def child_env(threads: int) -> dict[str, str]:
    """The thread and allocator variables the harness gives its workers, for a bare loop in a
    child, so that only the harness differs."""
    return {**os.environ, **MALLOC_SETTINGS, **{name: str(threads) for name in THREAD_VARIABLES}}


def describe_rounds(values: list[float]) -> str:
    return ", ".join(f"{v:.1f}" for v in values)
