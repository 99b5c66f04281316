"""What only GPUs can show, as pure functions of a run's record: which runs the GPU acceptance
makes (``cases``), and what each one's record must show (``CHECKS``: one small function per
check, each returning the problems it found, none when the record passes).

tests/test_gpu.py makes the runs on GPUs and applies these (``pytest -m gpu``, which
benchmarks/gpu_acceptance.sh runs on a machine that has GPUs); tests/test_gpu_checks.py shows
every check on hand-made records, which needs no GPU.

A figure that is missing, zero or of the wrong length is a problem, never a pass: a GPU run
that fell back to the CPU reports no device figures, and the script these checks came from
passed a sharded backend whose ranks all reported 0 bytes of optimizer state
(``max(moments) > 0.55 * sum(moments)`` is false when both are 0).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from itertools import product
from typing import NamedTuple

from parbench.cli.parity import relative_difference
from parbench.run.modes import COMPUTE_DTYPES, PRECISIONS
from parbench.run.registry import BACKENDS

MODELS = ("resnet", "gpt")  # the image model, the language model
# what a GPU must run: a refusal that names one of these fails, unless it is a mode the
# backend was never run with ("not verified"), which is refused on GPUs too
MUST_RUN_ON_GPU = ("--precision", "--sync-bn")
# a sharded rank may hold 1/N of the whole optimizer state and this share of it more: shards
# are padded to equal sizes, and a ZeRO stage that shards by whole tensors splits unevenly
SHARD_SLACK = 0.05


class Run(NamedTuple):
    """One GPU run as the checks see it: its record, the options it was asked beyond backend
    and devices, and (for a sharded backend) its replicated twin's record at the same options,
    whose optimizer state is the whole that each shard is measured against."""

    record: dict
    extra: tuple[str, ...] = ()
    twin: dict | None = None


# --- the runs


def cases(names: list[str] | None = None,
          models: tuple[str, ...] = MODELS) -> Iterator[tuple[str, int, tuple[str, ...]]]:
    """(backend, devices, extra options) of every GPU acceptance run, for 1 and 2 devices,
    whether or not this machine can hold them (the test says why it skips one): every named
    backend (default: all) x model x precision x {eager, compile}, ``--sync-bn`` on the
    multi-process backends (the resnet's: the GPT has no BatchNorm), and the sharded backends
    that reshard with ``--reshard-after-forward no`` too (its optimizer state is sharded as
    well: ZeRO-2 against ZeRO-3)."""
    for backend in (BACKENDS[name] for name in names or BACKENDS):
        counts = (1, 2) if backend.parallel else (1,)
        for model, devices, precision, compiled in product(models, counts, PRECISIONS,
                                                           (False, True)):
            yield backend.name, devices, ("--model", model, "--precision", precision,
                                          *(("--compile",) if compiled else ()))
        if "resnet" in models and backend.parallel and not backend.one_process:
            yield backend.name, 2, ("--model", "resnet", "--sync-bn")
        if "resnet" in models and backend.reshards:
            yield backend.name, 2, ("--model", "resnet", "--reshard-after-forward", "no")


def twin_options(extra: tuple[str, ...]) -> tuple[str, ...]:
    """A sharded run's options as its replicated twin takes them: without the reshard choice,
    which only a sharded backend has."""
    if "--reshard-after-forward" not in extra:
        return extra
    at = extra.index("--reshard-after-forward")
    return extra[:at] + extra[at + 2:]


def must_run(refusal: str) -> bool:
    """Whether parbench's refusal of a GPU case is a failure: it refused a mode GPUs must run
    (Paddle AMP, synchronized BatchNorm), rather than one the backend was never verified with."""
    return any(option in refusal for option in MUST_RUN_ON_GPU) and "not verified" not in refusal


# --- the checks, one per fact; each sees an ok record (``ok`` runs first)


def _asked(extra: tuple[str, ...], option: str, default: str) -> str:
    return extra[extra.index(option) + 1] if option in extra[:-1] else default


def _positive(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 \
        and math.isfinite(value)


def ok(run: Run) -> list[str]:
    """The run finished and measured something: every other check reads its metrics."""
    record = run.record
    if record.get("status") != "ok":
        first = (record.get("error") or "no error text").splitlines() or ["no error text"]
        return [f"{record.get('status')}: {first[0]}"]
    return [] if isinstance(record.get("metrics"), dict) else ["an ok record without metrics"]


def compute_dtype(run: Run) -> list[str]:
    """The precision asked is the one computed in (Paddle's AMP does nothing on a CPU place, so
    only a GPU shows it took effect)."""
    precision = _asked(run.extra, "--precision",
                       (run.record.get("modes") or {}).get("precision", "fp32"))
    computed = run.record["metrics"].get("compute_dtype")
    return [] if computed is not None and computed == COMPUTE_DTYPES.get(precision) else \
        [f"computed in {computed}, asked {precision}"]


def compiled_graphs(run: Run) -> list[str]:
    """``--compile`` compiled at least one graph (a silent eager fallback counts 0)."""
    if "--compile" not in run.extra:
        return []
    graphs = run.record["metrics"].get("compiled_graphs")
    return [] if _positive(graphs) else ["compiled no graph"]


def peak_device_mb(run: Run) -> list[str]:
    """One positive allocator peak per device: a CPU fallback reports none, a device that held
    nothing 0."""
    peaks, world = run.record["metrics"].get("peak_device_mb"), run.record.get("world_size")
    if isinstance(peaks, list) and len(peaks) == world and all(map(_positive, peaks)):
        return []
    return [f"peak_device_mb {peaks} is not one positive value per device"]


def _collective_library(record: dict) -> str:
    """What the record names the collectives' library by; where a one-process backend names
    none, what it runs on by construction: nn.DataParallel broadcasts and reduces through
    torch.cuda.comm, NCCL's where torch has NCCL (``nccl_version``); XLA runs JAX's GPU
    collectives on NCCL (jaxlib reports no version, so the GPUs it drove are the evidence)."""
    env = record.get("env") or {}
    named = " ".join(str(env.get(k)) for k in ("process_group", "cross_device_ops",
                                               "communication"))
    if any(env.get(k) for k in ("process_group", "cross_device_ops", "communication")):
        return named
    if record.get("backend") == "torch-dp" and env.get("nccl_version"):
        return f"nccl {env['nccl_version']} (nn.DataParallel's torch.cuda.comm)"
    if record.get("framework") == "jax" and env.get("gpus"):
        return "nccl (XLA's GPU collectives)"
    return named


def nccl(run: Run) -> list[str]:
    """The collectives of a multi-device run ran on NCCL, not gloo or a CPU fallback."""
    if (run.record.get("world_size") or 0) < 2:
        return []
    used = _collective_library(run.record)
    return [] if "nccl" in used.lower() else [f"collectives not on NCCL ({used})"]


def one_gpu_per_rank(run: Run) -> list[str]:
    """Each rank drove its own GPU (two on one device would share its memory and compute), and
    a one-device run drove a GPU at all."""
    world, gpus = run.record.get("world_size") or 0, (run.record.get("env") or {}).get("gpus")
    gpus = gpus or []
    if world < 2:
        return [] if gpus else [f"{world} device on GPUs {gpus}: ran on no GPU"]
    return [] if len(set(gpus)) == world else \
        [f"{world} devices on GPUs {gpus}: not one GPU each"]


def dataparallel_imbalance(run: Run) -> list[str]:
    """nn.DataParallel's device 0 holds more memory than device 1 (the loss, the optimizer and
    the gathered outputs live there), so the imbalance the report shows is real."""
    record = run.record
    if record.get("backend") != "torch-dp" or (record.get("world_size") or 0) < 2:
        return []
    peaks = record["metrics"].get("peak_device_mb")
    if isinstance(peaks, list) and len(peaks) >= 2 and all(map(_positive, peaks[:2])) \
            and peaks[0] > peaks[1]:
        return []
    return [f"DataParallel device 0 holds no more memory than device 1: {peaks}"]


def _optimizer_bytes(record: dict | None) -> list:
    held = ((record or {}).get("metrics") or {}).get("state_bytes") or []
    return [device.get("optimizer") if isinstance(device, dict) else None for device in held]


def sharded_state(run: Run) -> list[str]:
    """A sharded backend's ranks each hold about 1/N of the optimizer state (every ZeRO level
    and FSDP shard it), and together all of it: each rank's share is > 0 and at most
    1/N + SHARD_SLACK of the whole, the replicated twin's per-rank state where its record is
    given, else the shards' sum. A rank reporting 0 bytes fails: the whole would be 0 too."""
    record, world = run.record, run.record.get("world_size") or 0
    backend = BACKENDS.get(record.get("backend"))
    if backend is None or not backend.sharded or world < 2:
        return []
    moments = _optimizer_bytes(record)
    if len(moments) != world or not all(map(_positive, moments)):
        return [f"optimizer state per rank {moments}: not one positive value per rank"]
    whole, source = sum(moments), "their sum"
    if run.twin is not None:
        replicated = _optimizer_bytes(run.twin)
        if not replicated or not all(map(_positive, replicated)):
            return [(f"the replicated {run.twin.get('backend')} reports optimizer state "
                     f"{replicated}: nothing to measure the shards against")]
        whole, source = max(replicated), f"{run.twin['backend']}'s per rank"
        if sum(moments) < (1 - SHARD_SLACK) * whole:
            return [f"optimizer state per rank {moments} sums to less than {source}, {whole}"]
    if max(moments) > (1 / world + SHARD_SLACK) * whole:
        return [f"optimizer state per rank {moments}: not sharded over {world} ranks"
                + ("" if run.twin is None else f" ({source}: {whole})")]
    return []


CHECKS: dict[str, Callable[[Run], list[str]]] = {
    check.__name__: check for check in (ok, compute_dtype, compiled_graphs, peak_device_mb,
                                        nccl, one_gpu_per_rank, dataparallel_imbalance,
                                        sharded_state)}


def failed_checks(record: dict, extra: tuple[str, ...] | list[str] = (),
                  twin: dict | None = None) -> dict[str, list[str]]:
    """{check name: its problems} of every check the record fails; a record that is not ok
    fails ``ok`` alone, since the others read what it did not measure."""
    run = Run(record, tuple(extra), twin)
    found = {"ok": ok(run)}
    if not found["ok"]:
        found.update((name, check(run)) for name, check in CHECKS.items() if name != "ok")
    return {name: problems for name, problems in found.items() if problems}


def problems(record: dict, extra: tuple[str, ...] | list[str] = (),
             twin: dict | None = None) -> list[str]:
    """Every GPU-only fact the record gets wrong, in the checks' order."""
    return [problem for found in failed_checks(record, extra, twin).values()
            for problem in found]


# --- parity, which takes two runs


def loss_parity(reference: dict, record: dict, tolerance: float) -> list[str]:
    """The run's loss curve is its reference's (the framework's single device, same steps)
    within ``tolerance``, parbench parity's max relative difference. Both curves must be there,
    of one length, positive and finite: a cross-entropy is never 0, and two empty or all-zero
    curves are equal without either run having trained."""
    curves = [((r.get("metrics") or {}).get("loss_curve") or []) for r in (reference, record)]
    if not all(curves) or len(curves[0]) != len(curves[1]):
        return [f"loss curves of {len(curves[0])} and {len(curves[1])} steps: nothing to compare"]
    if not all(_positive(loss) for curve in curves for loss in curve):
        return [f"a loss curve is not positive and finite: {curves[0]} / {curves[1]}"]
    difference = relative_difference(curves[0], curves[1])
    return [] if difference <= tolerance else \
        [f"loss curve {difference:.2e} from {reference.get('backend')}'s, over {tolerance:g}"]
