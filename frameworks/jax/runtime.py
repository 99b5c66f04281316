"""The helpers every JAX strategy uses: the devices and compute threads (set in the environment
for JAX's CPU client), the check that each replica holds its weights on a device of its own,
the compiled evaluation, reading one device's copy of the state, and the facts a record needs
(versions, devices, threads, memory peaks). The strategies' base class is in strategy.py, the
compiled step's pieces in training.py.

When JAX reads its settings (measured, JAX 0.10.2): ``import jax`` reads neither XLA_FLAGS nor
PJRT_NPROC. The backend reads both once, when the first device query or array creates it;
after that, changing them changes nothing, silently. So ``configure`` must run before anything
touches a device (importing jax and this module's helpers is fine), and it refuses to run
once the backend exists: the strategies' base class (strategy.py) calls it first thing in
``__init__``.

Threads: XLA's CPU client runs the compute of every device on one intra-op thread pool
("XLAEigen") of ``max(PJRT_NPROC, devices)`` threads (XLA's ``DefaultThreadPoolSize``: PJRT_NPROC,
else NPROC, else the cores this process may use; at least one per device, which a collective
needs). PJRT_NPROC is what bounds it (measured on the resnet step, per-thread CPU time from
/proc): PJRT_NPROC=1, one pool thread did the whole step; 2 and 4, the step's CPU time spread
evenly over 2 and 4 pool threads. ``--xla_cpu_multi_thread_eigen=false`` bounds nothing here
(a 1-device step still ran on 2 pool threads), and OMP_NUM_THREADS is not read. The record gets
the pool's size counted from the process's thread names (``intra_op_threads``), not the setting.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import jax
import numpy as np

from parbench.base.devices import physical_gpu
from parbench.run.job import Job

from . import model
from .layers import Stats
from .tasks import TaskLoss

DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"
THREADS_VARIABLE = "PJRT_NPROC"  # XLA's DefaultThreadPoolSize reads it (else NPROC, else cores)
POOL_THREAD = "tf_XLAEigen"  # the intra-op pool's thread name, as /proc shows it
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"  # one per XLA compilation


def configure(job: Job, devices: int) -> dict:
    """The devices and compute threads of this process, for JAX's backend to read when it
    starts: on CPU ``--xla_force_host_platform_device_count`` = ``devices`` (appended to the
    user's XLA_FLAGS, replacing a count already there) and PJRT_NPROC = --threads. Returns
    what was set, for the record."""
    # jax's private module, for the one call that tells whether the backend started (no
    # public one does); imported here, where it is needed, and importing it starts nothing
    from jax._src import xla_bridge

    if xla_bridge.backends_are_initialized():
        raise RuntimeError("JAX's backend started before parbench set its devices and threads "
                           "(XLA_FLAGS, PJRT_NPROC): something touched a device too early")
    flags = [flag for flag in os.environ.get("XLA_FLAGS", "").split()
             if not flag.startswith(DEVICE_COUNT_FLAG)]
    os.environ["XLA_FLAGS"] = " ".join([*flags, f"{DEVICE_COUNT_FLAG}={devices}"])
    os.environ[THREADS_VARIABLE] = str(job.threads)
    jax.config.update("jax_enable_x64", False)  # float32 (and int32) throughout, like the spec
    return {"xla_flags": os.environ["XLA_FLAGS"], "pjrt_nproc": job.threads}


def local_devices(count: int) -> list[jax.Device]:
    """The first ``count`` devices of the default backend: GPUs where JAX has them, else the
    logical CPU devices ``configure`` asked for."""
    devices = jax.local_devices()
    if len(devices) < count:
        raise RuntimeError(f"asked for {count} devices, JAX sees {len(devices)}: {devices}")
    return devices[:count]


def checked_replica_devices(tree, count: int) -> list[jax.Device]:
    """Where the replicas of ``tree``'s first array live (one shard per replica: a replicated
    or a stacked array); an error unless they are ``count`` distinct devices."""
    leaf = jax.tree.leaves(tree)[0]
    devices = [shard.device for shard in leaf.addressable_shards]
    if len(devices) != count or len(set(devices)) != count:
        raise RuntimeError(f"{count} replicas but their weights live on {devices}: replicas "
                           "share a device")
    return devices


def pool_threads() -> int | None:
    """Threads of XLA's intra-op pool in this process, counted by name (None off Linux)."""
    tasks = Path("/proc/self/task")
    if not tasks.is_dir():
        return None
    names = []
    for task in tasks.iterdir():
        try:
            names.append((task / "comm").read_text().strip())
        except OSError:  # a thread that ended meanwhile
            continue
    return names.count(POOL_THREAD)


class CompileCounter:
    """XLA compilations while a step runs (``with counter.counting(): step(...)``), seen
    through jax.monitoring: the evidence for Observed.compiled_graphs (1 per step shape; more
    means the step was traced and compiled again). Counted by time window, not by name: pmap
    compiles under an internal name."""

    def __init__(self):
        self.count, self.active = 0, False
        jax.monitoring.register_event_duration_secs_listener(self._seen)

    def _seen(self, event: str, duration_secs: float, **kwargs) -> None:
        if self.active and event == COMPILE_EVENT:  # compilation runs in the calling thread
            self.count += 1

    @contextmanager
    def counting(self) -> Iterator[None]:
        self.active = True
        try:
            yield
        finally:
            self.active = False


def evaluation(spec, task: TaskLoss, dtype: str, stacked_params: bool = False,
               stacked_stats: bool = False) -> Callable:
    """(params, stats, x, y) -> the task's evaluation outputs (image classification: predicted
    classes, loss_sum; language modelling: predicted tokens [rows, T], loss_sum; object
    detection: the maps [rows, 5, H/4, W/4], loss_sum) in inference mode, compiled once per
    chunk shape; it runs where its inputs are (the first device: see ``on_device``, whose
    stacked arrays keep their replica axis of 1, taken off here, inside the program)."""
    def unstack(tree, stacked: bool):
        return jax.tree.map(lambda a: a[0], tree) if stacked else tree

    def evaluate(params, stats, x, y):
        return model.evaluate(spec, unstack(params, stacked_params), unstack(stats, stacked_stats),
                              x, y, task=task, dtype=dtype)

    return jax.jit(evaluate)


def on_device(tree, device: jax.Device):
    """``device``'s shard of each array of ``tree``, without a transfer or a program: of a
    replicated array its whole value, of a stacked one (a leading replica axis, entry d on
    device d) that device's entry, still with that axis (of length 1)."""
    def shard(array: jax.Array) -> jax.Array:
        (data,) = [s.data for s in array.addressable_shards if s.device == device]
        return data

    return jax.tree.map(shard, tree)


def host_copy(tree, device: jax.Device, stacked: bool):
    """``device``'s values of ``tree`` as numpy (its entry of a stacked tree)."""
    return jax.tree.map(lambda data: np.asarray(data)[0] if stacked else np.asarray(data),
                        on_device(tree, device))


def peak_device_mb(devices: list[jax.Device]) -> list[float] | None:
    """Allocator peaks per GPU; None on CPU, where XLA keeps no such counter."""
    if devices[0].platform == "cpu":
        return None
    return [d.memory_stats()["peak_bytes_in_use"] / 2**20 for d in devices]


def _cuda_version() -> str | None:
    try:  # imported here: only a GPU run asks, and only jaxlib's CUDA plugin provides it
        from jax._src.lib import cuda_versions

        version = cuda_versions.cuda_runtime_get_version()
        return f"{version // 1000}.{version % 1000 // 10}"
    except Exception:  # noqa: BLE001  (no CUDA plugin: no version to report)
        return None


def describe(devices: list[jax.Device], settings: dict, notes: list[str]) -> dict:
    gpu = devices[0].platform == "gpu"
    return {"framework": "jax", "framework_version": jax.__version__,
            "device_names": [str(d) for d in devices],
            "gpu_models": [d.device_kind for d in devices] if gpu else [],
            "gpus": [physical_gpu(d.local_hardware_id) for d in devices] if gpu else [],
            "cuda_version": _cuda_version() if gpu else None,
            "nccl_version": None,  # jaxlib reports none; XLA links NCCL on GPUs
            "intra_op_threads": pool_threads(), **settings, "notes": notes}


def batchnorm_layers(stats: Stats) -> int:
    return sum(name.endswith(".running_mean") for name in model.names(stats))
