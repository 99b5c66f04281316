"""``parbench peak``: the dense-matmul peak of each installed framework and dtype on this
machine, with the threads each process of a 1- and a 2-device run gets (the default
comparison's), measured where the cache lacks it (all of it with --refresh), printed as a
table beside the GPU's datasheet figure, and cached for runs to read (parbench.run.peak says
how it is measured and where the cache is)."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

from tabulate import tabulate

from parbench.base.devices import cpu_count, gpu_count, gpu_models
from parbench.base.errors import UsageError
from parbench.launch.supervise import allocator_env
from parbench.run.datasheet import datasheet_peak
from parbench.run.matmul import CPU_SIZES, DEVICES, DTYPES, GPU_SIZES
from parbench.run.peak import (
    PeakError,
    cache_path,
    installed_version,
    measure,
    measured_peak,
    read_cache,
    store,
)
from parbench.run.registry import FRAMEWORKS

DEFAULT_DTYPES = "float32,bfloat16"
MAX_THREADS = 4096
SIZE_RANGE = (16, 32768)  # n of an n x n product: a float32 one of 32768 is 4 GiB
HEADERS = ("framework", "version", "dtype", "threads", "device", "TFLOP/s", "best n",
           "datasheet TFLOP/s", "source", "note")


@dataclass(frozen=True)
class PeakPlan:
    """What to measure, every value checked."""

    frameworks: list[str]
    dtypes: list[str]
    threads: list[int]  # one measurement per thread count
    device: str
    sizes: list[int]  # the n of the n x n products, --sizes or the device's default


def add_peak_parser(sub: argparse._SubParsersAction) -> None:
    """The ``peak`` sub-command. Numbers are read as text and checked here, so that bad input
    is one line (argparse's own type errors print the usage too)."""
    peak = sub.add_parser("peak", help="measure and cache the dense-matmul peak per framework "
                          "and dtype (what a run's utilisation is held against)")
    peak.add_argument("--framework", action="append", metavar="F",
                      help=f"{', '.join(FRAMEWORKS)} (repeatable); default: every installed")
    peak.add_argument("--dtype", default=DEFAULT_DTYPES,
                      help=f"comma-separated, of {', '.join(DTYPES)} ({DEFAULT_DTYPES})")
    peak.add_argument("--threads", help="comma-separated compute threads, as a run's --threads "
                      "(default: what each process of a 1- and a 2-device run gets: the cores "
                      "this process may use, and half of them)")
    peak.add_argument("--device", help="cpu or cuda (the first visible GPU); default: cuda "
                      "where there is a GPU, else cpu")
    peak.add_argument("--sizes", help="comma-separated n of the n x n products (default "
                      f"{','.join(map(str, CPU_SIZES))} on a CPU, "
                      f"{','.join(map(str, GPU_SIZES))} on a GPU); an entry cached for other "
                      "sizes is measured again (and replaced: runs read the latest)")
    peak.add_argument("--refresh", action="store_true",
                      help="measure everything again, cached or not")
    peak.set_defaults(func=cmd_peak)


def cmd_peak(args: argparse.Namespace) -> int:
    plan = peak_plan(args)
    read_cache()  # a corrupt cache is refused before anything is measured
    rows, failed = [], 0
    for framework in plan.frameworks:
        for dtype in plan.dtypes:
            for threads in plan.threads:
                result, source = _one(plan, framework, dtype, threads, args.refresh)
                failed += source == "failed"
                rows.append(_row(plan, framework, dtype, threads, result, source))
    print(tabulate(rows, headers=HEADERS, tablefmt="github"))
    print(f"cache: {cache_path()}", file=sys.stderr)
    return 1 if failed else 0


def peak_plan(args: argparse.Namespace) -> PeakPlan:
    """The command's options, checked: a bad one is a UsageError (one line, exit 2)."""
    frameworks = args.framework or [name for name, framework in FRAMEWORKS.items()
                                    if framework.missing_reason() is None]
    for name in frameworks:
        if name not in FRAMEWORKS:
            raise UsageError(f"--framework {name}: not one of {', '.join(FRAMEWORKS)}")
        if FRAMEWORKS[name].missing_reason():
            raise UsageError(f"--framework {name}: {FRAMEWORKS[name].missing_reason()}")
    if not frameworks:
        raise UsageError("no framework is installed here; see 'parbench list'")
    dtypes = [dtype.strip() for dtype in args.dtype.split(",")]
    unknown = [dtype for dtype in dtypes if dtype not in DTYPES]
    if unknown:
        raise UsageError(f"--dtype {args.dtype}: each one of {', '.join(DTYPES)}")
    device = _device(args.device)
    threads = [cpu_count(), max(1, cpu_count() // 2)] if args.threads is None else [
        _integer("--threads", text, 1, MAX_THREADS) for text in args.threads.split(",")]
    if device == "cuda":  # host threads do not drive a GPU's product: one measurement
        threads = threads[:1]
    sizes = [_integer("--sizes", size, *SIZE_RANGE) for size in args.sizes.split(",")] \
        if args.sizes is not None else list(GPU_SIZES if device == "cuda" else CPU_SIZES)
    return PeakPlan(list(dict.fromkeys(frameworks)), list(dict.fromkeys(dtypes)),
                    list(dict.fromkeys(threads)), device, sorted(set(sizes)))


def _integer(option: str, text: str, low: int, high: int) -> int:
    """``text`` as a whole number in [low, high], or a UsageError naming ``option``."""
    try:
        value = int(text.strip())
    except ValueError:
        raise UsageError(f"{option} {text!r}: not a whole number") from None
    if not low <= value <= high:
        raise UsageError(f"{option} {value}: must be from {low} to {high}")
    return value


def _device(given: str | None) -> str:
    if given is None:
        return "cuda" if gpu_count() else "cpu"
    if given not in DEVICES:
        raise UsageError(f"--device {given}: cpu or cuda")
    if given == "cuda" and not gpu_models():
        raise UsageError("--device cuda, but the NVIDIA driver shows no GPU here")
    return given


def _one(plan: PeakPlan, framework: str, dtype: str, threads: int,
         refresh: bool) -> tuple[dict, str]:
    """(result, source): the cached entry where it fits the plan, else a new measurement,
    cached; progress on stderr. A failed measurement is ({"error": why}, "failed"), and the
    others go on (timm's benchmark does the same per model)."""
    label = f"peak: {framework} {dtype}, {threads} thread(s), {plan.device}: "
    version = installed_version(FRAMEWORKS[framework].imports[0])
    cached = None if refresh or version is None else measured_peak(
        framework, version, dtype, threads, plan.device)
    if cached is not None and _fits(cached, plan.sizes):
        print(f"{label}cached ({cached['measured_at']})", file=sys.stderr)
        return cached, "cached"
    print(label, end="", file=sys.stderr, flush=True)
    started = time.monotonic()
    try:
        result = measure(framework, dtype, threads, plan.device, plan.sizes,
                         env=allocator_env())
    except PeakError as error:
        print(f"failed: {error}", file=sys.stderr)
        return {"error": str(error)}, "failed"
    store(result)
    print(f"{_figure(result)} ({time.monotonic() - started:.0f} s)", file=sys.stderr)
    return result, "measured"


def _fits(cached: dict, sizes: list[int]) -> bool:
    """Whether a cached entry answers the plan: one that tried exactly its sizes (skipped ones
    included), or that has no such product at all."""
    if cached["tflops"] is None:
        return True
    tried = {figure["size"] for figure in cached["sizes"]} | set(cached["skipped_sizes"])
    return tried == set(sizes)


def _figure(result: dict) -> str:
    if result["tflops"] is None:
        return f"unsupported: {result['unsupported']}"
    return f"{result['tflops']:.3f} TFLOP/s (n={result['best_size']})"


def _row(plan: PeakPlan, framework: str, dtype: str, threads: int, result: dict,
         source: str) -> list:
    """One table row; the datasheet figure only on a GPU the table knows."""
    tflops = result.get("tflops")
    note = result.get("error") or result.get("unsupported") or ""
    if result.get("skipped_sizes"):
        note = f"skipped n={','.join(map(str, result['skipped_sizes']))} (too slow)"
    return [framework, result.get("framework_version", ""), dtype, threads, plan.device,
            "" if tflops is None else f"{tflops:.3f}", result.get("best_size") or "",
            _datasheet(plan.device, dtype), source, note]


def _datasheet(device: str, dtype: str) -> str:
    """The GPU's datasheet figure for the dtype (float32 with its TF32 one), or ''."""
    model = (gpu_models() or [None])[0] if device == "cuda" else None
    figure = datasheet_peak(model, dtype) if model else None
    if figure is None:
        return ""
    tf32 = datasheet_peak(model, "tf32") if dtype == "float32" else None
    return f"{figure:g}" + (f" (tf32 {tf32:g})" if tf32 else "")
