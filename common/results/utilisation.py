"""How far a run is from what the hardware can do: the record's ``metrics.flops``.

* ``per_step``: the model FLOPs of one optimizer step over the global batch, from the spec alone
  (parbench.contract.flops: matrix products and attention, 2 FLOPs a multiply-add, training = 3 x
  forward), the same figure in every framework, so achieved FLOP/s rank backends as throughput
  does.
* ``achieved_tflops``: per_step / the median steady step time, all devices together, and per
  device (the world size's share).
* ``utilisation``: the whole run's achieved FLOP/s / the dense-matmul peak of everything the
  run computed on, as ``parbench peak`` measured it on this machine with this framework, its
  version and the run's compute dtype (the denominator stas00's maximum-achievable-matmul
  finder argues for). On CPUs that is one process's peak at all the threads the run's workers
  on one node had together (``peak_threads``), times the nodes: one process driving 2
  replicas with 2 threads and 2 processes of 1 thread each are held against the same
  2-thread peak, so their figures compare. On GPUs, one device's peak times the devices.
  None when the peak was not measured: a run never measures it itself (it would take the
  run's own machine time and cores).
* ``mfu``: achieved per device / the datasheet's dense peak of the GPU for the compute dtype
  (model FLOPs utilisation as torchtitan, nanoGPT and MLPerf quote it). Only where the GPU's
  reported name is in parbench.run.datasheet; on a CPU, or an unknown GPU, None: never a guess.
  float32 is held against the fp32 peak, what the spec's float32 means; a framework that runs
  float32 convolutions as TF32 (torch's cuDNN default) can reach past it.
"""

from __future__ import annotations

import sys

from parbench.contract.flops import TRAINING_PER_FORWARD, model_flops, step_flops
from parbench.contract.spec import ModelSpec
from parbench.run.datasheet import datasheet_peak
from parbench.run.peak import PeakCacheError, measured_peak

CONVENTION = (f"model FLOPs: matrix products and attention (full T x T scores), 2 per "
              f"multiply-add, training = {TRAINING_PER_FORWARD} x forward "
              "(parbench.contract.flops)")
TERA = 1e12


def peak_threads(threads: int, one_process: bool, devices_per_node: int) -> int:
    """The threads a run's workers on one node had together: one process drives every device
    of a one-process backend (DataParallel, MirroredStrategy, pmap), else one per device."""
    return threads * (1 if one_process else devices_per_node)


def flops_metrics(spec: ModelSpec, global_batch: int, step_ms: float, world_size: int,
                  hardware: dict) -> dict:
    """The record's ``metrics.flops``. ``hardware`` names what the peaks are looked up by:
    framework, framework_version, compute_dtype, peak_threads (the run's threads on one node),
    nodes and gpu_model (None on a CPU); without a compute dtype (a framework that did not
    report it), no peaks."""
    per_step = step_flops(spec, global_batch)
    achieved = per_step / (step_ms / 1000) / TERA
    per_device = achieved / world_size
    gpu = hardware["gpu_model"]
    measured, datasheet = _peaks(hardware)
    # the run's whole peak: a GPU's times the GPUs, else one node's cores' times the nodes
    run_peak = None if measured is None else measured * (
        world_size if gpu else hardware["nodes"])
    return {"convention": CONVENTION, "per_step": per_step,
            "per_sample": model_flops(spec).training_per_sample,
            "achieved_tflops": achieved, "achieved_tflops_per_device": per_device,
            "measured_peak_tflops": run_peak,
            "peak_threads": None if gpu else hardware["peak_threads"],
            "utilisation": _share(achieved, run_peak),
            "datasheet_peak_tflops": datasheet, "mfu": _share(per_device, datasheet)}


def _peaks(hardware: dict) -> tuple[float | None, float | None]:
    """(measured, datasheet) peak TFLOP/s: the measured one of one GPU, or of one process at
    the run's threads of one node; the datasheet's per GPU. A record that could not tell its
    compute dtype gets neither, and a cache that cannot be read is said on stderr, not
    raised: it must not cost the run its record."""
    dtype, gpu = hardware["compute_dtype"], hardware["gpu_model"]
    if dtype is None:
        return None, None
    try:
        measured = measured_peak(hardware["framework"], hardware["framework_version"], dtype,
                                 hardware["peak_threads"], gpu or "cpu")
    except PeakCacheError as error:  # the run's record matters more than the figure
        print(f"parbench: warning: {error}; the record has no utilisation", file=sys.stderr)
        measured = None
    return (measured["tflops"] if measured else None,
            datasheet_peak(gpu, dtype) if gpu else None)


def _share(achieved: float, peak: float | None) -> float | None:
    return None if peak is None else achieved / peak
