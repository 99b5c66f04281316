"""torch-dp: ``nn.DataParallel``, one process driving every visible CUDA device.

DataParallel scatters each global batch along dim 0 into equal contiguous chunks (the shared
shard rule), replicates the module on every device each step and gathers outputs on device 0,
where the loss and the optimizer run: device 0 holds more memory than the others.
Without CUDA, DataParallel silently runs the module on the CPU as is; the harness refuses
``--devices`` > 1 there, and the record notes the no-op. ``--precision`` enters autocast inside
the replicated forward too (runtime.AutocastForward); ``--compile`` and ``--sync-bn`` are
refused (see parbench.run.registry, torch-dp's refusals).
"""

from __future__ import annotations

import torch
from torch import nn

from parbench.contract.data import Dataset
from parbench.run.feeds import Feed
from parbench.run.job import Job
from parbench.run.loop import run_worker

from . import runtime
from .input import random_feed
from .profile import DATA_PARALLEL, ONE_DEVICE, StepProfiler
from .strategy import TorchStrategy

NO_OP_NOTE = "nn.DataParallel without CUDA is a no-op: the module ran unchanged on the CPU"
ACCUMULATION_NOTE = ("--grad-accum under nn.DataParallel: each micro-batch's backward reduces "
                     "gradients onto device 0 (replicas are rebuilt every forward), so "
                     "accumulation bounds activation memory but does not reduce communication")


class DataParallelStrategy(TorchStrategy):
    # --- setup: threads and seed (TorchStrategy), then the devices DataParallel will use
    def setup_devices(self, job: Job) -> list[torch.device]:
        if torch.cuda.is_available():
            return [torch.device(f"cuda:{i}") for i in range(job.world_size)]
        if job.world_size == 1:
            return [torch.device("cpu")]
        raise RuntimeError("nn.DataParallel needs CUDA devices for --devices > 1; "
                           "none is available")

    # --- model: canonical weights on device 0 (TorchStrategy); autocast is entered inside the
    # replicated forward, because the replicas run in threads that do not inherit it
    def wrap(self, module: nn.Module) -> nn.Module:
        ids = [d.index for d in self.devices] if self.device.type == "cuda" else None
        return nn.DataParallel(runtime.AutocastForward(module, self.device, self.modes.precision),
                               device_ids=ids)

    # --- data shard: the one process feeds the whole global batch (TorchStrategy's rank 0 of
    # 1); DataParallel splits it

    # --- input: --input native: one DataLoader over the global batch (RandomSampler seeded from
    # job.seed); DataParallel scatters each batch into one contiguous chunk per device
    def native_feed(self, job: Job, data: Dataset) -> Feed:
        return random_feed(job, data, self.device, devices=len(self.devices))

    # --- step: TorchStrategy's runtime.Step: inputs go to device 0, DataParallel scatters them;
    # the loss on the gathered outputs runs under Step's own autocast, in the caller's thread;
    # backward reduces the replicas' gradients onto device 0's module, where --clip-grad-norm
    # clips their sum

    # --- eval: through DataParallel, so the test rows are split over the devices too
    def evaluation_model(self) -> nn.Module:
        return self.model

    def describe(self) -> dict:
        no_op, notes = self.device.type == "cpu", []
        if no_op:
            notes.append(NO_OP_NOTE)
        if self.modes.grad_accum > 1:
            notes.append(ACCUMULATION_NOTE)
        return runtime.describe(self.devices, notes, dataparallel_no_op=no_op)

    # --- profile: --profile's steps, timed by phase; DataParallel's transfers stay inside them
    def profiler(self) -> StepProfiler:
        return StepProfiler(self.step, self.synchronize,
                            DATA_PARALLEL if len(self.devices) > 1 else ONE_DEVICE)


def main(job: Job) -> None:
    run_worker(job, DataParallelStrategy)
