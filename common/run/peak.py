"""The measured dense-matmul peak of this machine, per framework, version, dtype, device and
thread count: what ``parbench peak`` measures and caches, and what a run's utilisation is held
against (``measured_peak``; a run never measures it on its own, it reads the cache).

Method (after stas00's maximum-achievable-matmul-FLOPS finder, ml-engineering's
compute/accelerator/benchmarks/mamf-finder.py; the loop is parbench.run.matmul's, run inside
the framework's own process by ``frameworks/<framework>/peak.py``):

* The framework's own process, its compute threads fixed by the same functions a run's worker
  calls (torch.set_num_threads, TensorFlow's intra- and inter-op pools, Paddle's
  set_num_threads, PJRT_NPROC for JAX's XLA pool: each framework's runtime.py), with
  OMP_NUM_THREADS, MKL_NUM_THREADS and OPENBLAS_NUM_THREADS as the harness exports them to
  workers. A CPU measurement hides the GPUs (CUDA_VISIBLE_DEVICES empty); a GPU one uses the
  first visible GPU.
* Square products C = A @ B of random normal operands in the dtype, on the device, by the
  framework's default matmul (what a run's layers call, no ``out=``): 2 n^3 FLOPs each
  (2 M N K, a multiply-add being 2).
* First a small trial product: no kernel for the dtype, or a product that comes back in
  another dtype, and the entry says so in ``unsupported`` (one line) and has no figure.
* Then per size, ascending: two warm-up products (the first compiles, where the framework
  compiles: JAX's jit), then samples until a time budget is spent (0.75 s on a CPU, 1 s on a
  GPU; 5 to 50 samples). A sample times enough back-to-back products to last 10 ms (at most
  100), the device synchronised before the clock is read at both ends
  (torch.cuda.synchronize, tf.test.experimental.sync_devices, paddle.device.synchronize,
  jax.block_until_ready on every output: JAX dispatches asynchronously on the CPU too; CPU
  products of the other three return when done).
* A size's figure: 2 n^3 / the median seconds per product. The peak: the best (max) of the
  sizes' figures, reported with the size that won and every size's figure.
* Sizes: 512, 1024, 2048 on a CPU (4 frameworks x 2 dtypes took 41 s on 2 AMD EPYC cores,
  imports included; each size won somewhere), 2048 to 16384 on a GPU;
  ``parbench peak --sizes`` chooses others. A size whose sampling would take more than 4
  budgets (its product time predicted from the last size's by n^3) is skipped with the larger
  ones, and listed in ``skipped_sizes``: an emulated dtype (torch's float16 on a CPU without
  fp16 arithmetic) would otherwise take minutes.
* float32 is each framework's default float32 product, as a run gets it. On GPUs with TF32
  that may be TF32 (TensorFlow's documented default; JAX's DEFAULT precision and Paddle's
  cuBLAS switch allow it), not in torch (float32 matmul precision 'highest'): the entry's
  ``float32_matmul`` is the framework's setting, to read its figure against the datasheet's
  fp32 or tf32 one.

The cache: one JSON file, ``$PARBENCH_PEAK_CACHE``, else ``$XDG_CACHE_HOME/parbench/peak.json``
(``~/.cache/parbench/peak.json``): ``{"format": 1, "entries": [{"key": KEY, "measured_at":
ISO time, "result": RESULT}, ...]}``, where KEY is what a run's record can name (cache_key:
cpu_model, cores, device (the GPU's model, or "cpu"), framework, framework_version, dtype,
threads (None on a GPU)) and RESULT the framework process's JSON line
(parbench.run.matmul.time_sizes).
Written atomically (a temporary file renamed over it) under a lock, so that two
``parbench peak`` at once lose no entry.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, packages_distributions, version
from pathlib import Path

from parbench.base.devices import cpu_count, cpu_model, gpu_models
from parbench.base.errors import UsageError

from .matmul import DEVICES, DTYPES

CACHE_ENV = "PARBENCH_PEAK_CACHE"
CACHE_FORMAT = 1
TIMEOUT_S = 600  # one framework and dtype: about 10 s on a CPU
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
KEY_FIELDS = ("cpu_model", "cores", "device", "framework", "framework_version", "dtype",
              "threads")


class PeakError(RuntimeError):
    """A measurement that failed: one line naming the framework and dtype."""


class PeakCacheError(UsageError):
    """The cache file cannot be read or is not parbench's: one line naming it."""


def cache_path() -> Path:
    """Where the cache is: $PARBENCH_PEAK_CACHE, else under $XDG_CACHE_HOME (~/.cache)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "parbench" / "peak.json"


def device_model(device: str) -> str | None:
    """The device a key names: "cpu"; for "cuda" the first visible GPU's model (None where the
    driver shows none); any other name is taken to be a GPU's model already (a record's)."""
    if device == "cuda":
        return (gpu_models() or [None])[0]
    return device


def cache_key(framework: str, framework_version: str, dtype: str, threads: int,
              device: str = "cpu") -> dict:
    """What an entry is found by: this machine (CPU model, the cores this process may use,
    the device) and what was measured on it. On a GPU the host's compute threads do not drive
    the product, so its key has threads None: one entry answers runs of any thread count (a
    run of N processes gets cores / N each)."""
    model = device_model(device)
    return {"cpu_model": cpu_model(), "cores": cpu_count(), "device": model,
            "framework": framework, "framework_version": framework_version, "dtype": dtype,
            "threads": threads if model == "cpu" else None}


def measured_peak(framework: str, framework_version: str, dtype: str, threads: int,
                  device: str = "cpu") -> dict | None:
    """The cached measurement for this machine (``device``: "cpu", "cuda" or the GPU's model
    name) with its ``measured_at``, or None where ``parbench peak`` has not measured it. Its
    ``tflops`` is None where the framework has no such product (``unsupported`` says why).
    A corrupt cache is a PeakCacheError."""
    key = cache_key(framework, framework_version, dtype, threads, device)
    if key["device"] is None:  # "cuda" on a machine whose driver shows no GPU
        return None
    for entry in read_cache():
        if entry["key"] == key:
            return {**entry["result"], "measured_at": entry["measured_at"]}
    return None


def read_cache(path: Path | None = None) -> list[dict]:
    """The cache's entries ([] without a file), each one checked."""
    path = path or cache_path()
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as error:
        raise PeakCacheError(f"cannot read the peak cache {path}: {error}") from None
    except json.JSONDecodeError as error:
        raise PeakCacheError(f"the peak cache {path} is not JSON ({error.msg}, line "
                             f"{error.lineno}); delete it and run 'parbench peak'") from None
    problem = _cache_problem(data)
    if problem:
        raise PeakCacheError(f"the peak cache {path} is not parbench's: {problem}; delete it "
                             "and run 'parbench peak'")
    return data["entries"]


def _cache_problem(data: object) -> str | None:
    """What is wrong with a parsed cache file, or None."""
    if not isinstance(data, dict) or data.get("format") != CACHE_FORMAT:
        return f"no \"format\": {CACHE_FORMAT}"
    if not isinstance(data.get("entries"), list):
        return "no list of entries"
    for index, entry in enumerate(data["entries"]):
        fields = entry.get("key") if isinstance(entry, dict) else None
        if not isinstance(fields, dict) or set(fields) != set(KEY_FIELDS):
            return f"entry {index} has no key of {', '.join(KEY_FIELDS)}"
        problem = result_problem(entry.get("result"))
        if problem or not isinstance(entry.get("measured_at"), str):
            return f"entry {index}: {problem or 'no measured_at'}"
    return None


def result_problem(result: object) -> str | None:
    """What is wrong with a measurement (a framework process's line, or a cached one): a
    figure must be a finite positive number, or absent with the reason in ``unsupported``."""
    if not isinstance(result, dict):
        return "not a JSON object"
    tflops, why = result.get("tflops"), result.get("unsupported")
    if tflops is None:
        return None if isinstance(why, str) and why else "no tflops and no reason"
    if isinstance(tflops, bool) or not isinstance(tflops, (int, float)):
        return f"tflops {tflops!r} is not a number"
    if not math.isfinite(tflops) or tflops <= 0:
        return f"tflops {tflops} is not a finite positive number"
    if not isinstance(result.get("framework_version"), str):
        return "no framework_version"
    return None


def store(result: dict, path: Path | None = None) -> dict:
    """Add (or replace) ``result``'s entry, keyed by what it says it measured; returns it."""
    path = path or cache_path()
    key = cache_key(result["framework"], result["framework_version"], result["dtype"],
                    result["threads"], result["device"])
    if key["device"] is None:
        raise PeakError(f"{result['framework']} measured a GPU, but the driver shows no GPU "
                        "model to file it under (/proc/driver/nvidia)")
    entry = {"key": key, "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
             "result": result}
    with _locked(path):
        entries = [e for e in read_cache(path) if e["key"] != key]
        _write_atomically(path, {"format": CACHE_FORMAT, "entries": [*entries, entry]})
    return entry


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold the cache's lock file (beside it) for a read-modify-write."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


def _write_atomically(path: Path, data: dict) -> None:
    """A reader sees the old file or the new one, never half of one."""
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.",
                                     delete=False) as temporary:
        json.dump(data, temporary, indent=1)
        temporary.flush()
        os.fsync(temporary.fileno())
    os.replace(temporary.name, path)


def installed_version(framework_module: str) -> str | None:
    """The installed version of the distribution that provides ``framework_module`` (torch,
    tensorflow, paddle, jax), from its metadata, without importing it: what a cached entry of
    the framework would be keyed by (the version the framework itself reports)."""
    for distribution in packages_distributions().get(framework_module, []):
        try:
            return version(distribution)
        except PackageNotFoundError:
            continue
    return None


def measure(framework: str, dtype: str, threads: int, device: str = "cpu",
            sizes: Sequence[int] | None = None, env: dict[str, str] | None = None,
            timeout: float = TIMEOUT_S) -> dict:
    """Measure in the framework's own process (``python -m
    parbench.frameworks.<framework>.peak``) and return its checked result; ``env``: more
    environment for it (the CLI passes the allocator settings workers get). A failure or a
    timeout is a PeakError, one line naming the framework."""
    if dtype not in DTYPES or device not in DEVICES:
        raise ValueError(f"dtype {dtype!r} (one of {DTYPES}), device {device!r} ({DEVICES})")
    command = [sys.executable, "-m", f"parbench.frameworks.{framework}.peak", "--dtype", dtype,
               "--threads", str(threads), "--device", device]
    if sizes:
        command += ["--sizes", ",".join(str(size) for size in sizes)]
    what = f"{framework}'s {dtype} matmul benchmark"
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              env=_environment(threads, device, env))
    except subprocess.TimeoutExpired:
        raise PeakError(f"{what} did not finish in {timeout:g} s") from None
    if done.returncode != 0:
        last = ([line for line in done.stderr.splitlines() if line.strip()] or ["no output"])[-1]
        raise PeakError(f"{what} failed (exit code {done.returncode}): {last.strip()}")
    return _parsed(done.stdout, what)


def _environment(threads: int, device: str, extra: dict[str, str] | None) -> dict[str, str]:
    """The framework process's environment: the thread variables the harness gives workers;
    on the CPU no GPU visible (a framework would otherwise claim GPU memory)."""
    env = {**os.environ, **{name: str(threads) for name in THREAD_VARIABLES}}
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ banner, as workers do
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    return {**env, **(extra or {})}


def _parsed(stdout: str, what: str) -> dict:
    """The framework process's last line as a checked result."""
    lines = stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        result = None
    problem = result_problem(result) if result is not None else "no JSON line"
    if problem:
        raise PeakError(f"{what} printed no valid result: {problem}")
    return result
