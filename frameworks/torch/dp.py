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

import numpy as np
import torch
from torch import nn

from parbench.contract.data import Dataset
from parbench.contract.weights import load_weights
from parbench.run.feeds import Feed
from parbench.run.job import Job
from parbench.run.loop import run_worker

from . import runtime
from .input import random_feed
from .model import build_model
from .profile import DATA_PARALLEL, ONE_DEVICE, StepProfiler

NO_OP_NOTE = "nn.DataParallel without CUDA is a no-op: the module ran unchanged on the CPU"
ACCUMULATION_NOTE = ("--grad-accum under nn.DataParallel: each micro-batch's backward reduces "
                     "gradients onto device 0 (replicas are rebuilt every forward), so "
                     "accumulation bounds activation memory but does not reduce communication")


class DataParallelStrategy(runtime.TorchStrategy):
    # --- setup: threads and the devices DataParallel will use
    def __init__(self, job: Job):
        runtime.setup_threads(job)
        if torch.cuda.is_available():
            self.devices = [torch.device(f"cuda:{i}") for i in range(job.world_size)]
        elif job.world_size == 1:
            self.devices = [torch.device("cpu")]
        else:
            raise RuntimeError("nn.DataParallel needs CUDA devices for --devices > 1; "
                               "none is available")
        runtime.reset_peak_memory(self.devices)
        # --- model: canonical weights on device 0; autocast is entered inside the replicated
        # forward, because the replicas run in threads that do not inherit it
        weights = load_weights(job.weights_path)
        self.module = build_model(job.spec, weights).to(self.devices[0])
        self.modes = job.modes
        ids = [d.index for d in self.devices] if self.devices[0].type == "cuda" else None
        self.model = nn.DataParallel(
            runtime.AutocastForward(self.module, self.devices[0], self.modes.precision),
            device_ids=ids)
        self.optimizer = runtime.optimizer(self.module, job.optimizer_spec, job.spec)
        self.step = runtime.Step(self.model, self.module, self.optimizer, self.devices[0],
                                 self.modes, clip=job.optimizer_spec.clip_grad_norm)
        # --- data shard: the one process feeds the whole global batch; DataParallel splits it
        self.rank, self.num_processes = 0, 1

    # --- input: --input native: one DataLoader over the global batch (RandomSampler seeded from
    # job.seed); DataParallel scatters each batch into one contiguous chunk per device
    def native_feed(self, job: Job, data: Dataset) -> Feed:
        return random_feed(job, data, self.devices[0], devices=len(self.devices))

    # --- step: inputs go to device 0, DataParallel scatters them; the loss on the gathered
    # outputs runs under Step's own autocast, in the caller's thread; backward reduces the
    # replicas' gradients onto device 0's module, where --clip-grad-norm clips their sum
    def train_step(self, x: runtime.Rows, y: runtime.Rows, lr: float) -> float:
        return self.step(x, y, lr)

    # --- eval
    def evaluate(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
        return runtime.evaluate(self.model, x, y, self.devices[0], self.modes.precision)

    def describe(self) -> dict:
        no_op, notes = self.devices[0].type == "cpu", []
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
