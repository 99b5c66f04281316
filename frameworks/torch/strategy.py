"""TorchStrategy, the base class of the torch strategies (parbench.run.loop.Strategy): the
constructor every strategy follows, and what they all do alike once built.

The constructor is a template: threads and seed, this process's devices (``setup_devices``: a
strategy with a process group joins it there), peak memory counters reset, the canonical weights
loaded into the model on the first device, the module as the strategy trains it
(``convert_module``: DDP's --sync-bn), the module wrapped (``wrap``: compiled, DataParallel,
DDP), the run's optimizer, the Step in the run's modes (pausing gradient communication with
``hold_gradients`` for all but the last micro-batch), then which rows this process reads
(``data_shard``). A strategy file overrides only those hooks, and what else differs (its
loader, the sum across processes, its notes, its profiler, the release of its process group),
so it shows what its strategy adds.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import numpy as np
import torch
from torch import nn

from parbench.contract.data import Dataset
from parbench.contract.weights import load_weights
from parbench.run.feeds import Feed
from parbench.run.footprint import Communication, StateBytes
from parbench.run.job import Job
from parbench.run.modes import Observed
from parbench.run.portable import TrainingState

from . import checkpoint, portable, runtime
from .footprint import CollectiveBytes, state_bytes
from .model import build_model, export_weights
from .profile import StepProfiler
from .tasks import loss_for

NOT_COUNTED_COMPILED = ("not counted under --compile: the dispatch mode that counts "
                        "collectives would be traced into the compiled graphs")


class TorchStrategy(ABC):
    """What every torch strategy does alike; a subclass supplies the hooks of its constructor
    (see the module's docstring) and overrides what else differs. ``devices``: the devices this
    process drives, inputs on the first; ``module``: the bare nn.Module (canonical parameter
    names), what the optimizer updates and the weights are exported from; ``model``: what
    training calls (the module wrapped); ``step``: its runtime.Step."""

    # --- recipe: the constructor every torch strategy runs; a strategy file fills in its hooks
    def __init__(self, job: Job):
        self.task_loss = loss_for(job.task)  # first: a task torch lacks fails before setup
        runtime.setup_threads(job)
        self.modes = job.modes
        self.devices: list[torch.device] = self.setup_devices(job)
        runtime.reset_peak_memory(self.devices)
        weights = load_weights(job.weights_path)
        self.module: nn.Module = self.convert_module(build_model(job.spec, weights).to(self.device))
        self.model: nn.Module = self.wrap(self.module)
        self.optimizer = runtime.optimizer(self.module, job.optimizer_spec, job.spec)
        self.rule = job.optimizer_spec.name
        self.step = runtime.Step(self.model, self.module, self.optimizer, self.device,
                                 self.modes, self.task_loss, no_sync=self.hold_gradients,
                                 clip=job.optimizer_spec.clip_grad_norm,
                                 autocast_precision=self.autocast_precision)
        self.rank, self.num_processes = self.data_shard(job)
        self.collectives: Communication | None = None  # counted on the first step

    @property
    def device(self) -> torch.device:
        """Where inputs, labels and the loss go: the first of this process's devices."""
        return self.devices[0]

    # --- hooks: the constructor's, in the order it calls them

    @abstractmethod
    def setup_devices(self, job: Job) -> list[torch.device]:
        """The devices this process drives (after joining its process group, if it has one)."""

    def convert_module(self, module: nn.Module) -> nn.Module:
        """The built module as this strategy trains it, before wrapping: as it is."""
        return module

    @abstractmethod
    def wrap(self, module: nn.Module) -> nn.Module:
        """What training calls: the module, compiled or wrapped by the strategy."""

    @property
    def autocast_precision(self) -> str:
        """The precision the step's and evaluation's autocast computes in: the run's."""
        return self.modes.precision

    def hold_gradients(self) -> AbstractContextManager:
        """Around the forward and backward of every micro-batch but the last: no gradient
        communication to pause here (DDP's no_sync)."""
        return nullcontext()

    def data_shard(self, job: Job) -> tuple[int, int]:
        """(this process's rank, the processes that read data): one process reads every row of
        each global batch."""
        return 0, 1

    # What the loop calls (parbench.run.loop.Strategy).

    @abstractmethod
    def native_feed(self, job: Job, data: Dataset) -> Feed:
        """--input native: this process's batches from a torch DataLoader (see input.py)."""

    def train_step(self, x: runtime.Rows, y: runtime.Rows, lr: float) -> float:
        if self.collectives is not None:
            return self.step(x, y, lr)
        if self.modes.compile:  # a dispatch mode would be traced into the compiled graphs
            self.collectives = Communication(NOT_COUNTED_COMPILED, None)
            return self.step(x, y, lr)
        with CollectiveBytes() as counter:  # every step's collectives are the first one's
            loss = self.step(x, y, lr)
        self.collectives = counter.result()
        return loss

    def evaluation_model(self) -> nn.Module:
        """What evaluation calls: the eager module (only training steps are compiled)."""
        return self.module

    def evaluate(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
        return runtime.evaluate(self.evaluation_model(), x, y, self.device,
                                self.autocast_precision, self.task_loss)

    def all_reduce_sum(self, values: np.ndarray) -> np.ndarray:
        return values  # one process

    def synchronize(self) -> None:
        for device in self.devices:
            runtime.synchronize(device)

    def peak_device_mb(self) -> list[float] | None:
        return runtime.peak_device_mb(self.devices)

    def export_weights(self) -> dict[str, np.ndarray]:
        return export_weights(self.module)

    def describe(self) -> dict:
        return runtime.describe(self.devices)

    def state_bytes(self) -> list[StateBytes]:
        """The parameters, gradients and optimizer state this process holds (its one device's;
        nn.DataParallel's replicas are rebuilt each step and hold no state between steps)."""
        return [state_bytes(self.module, self.optimizer)]

    def step_communication(self) -> Communication | None:
        return self.collectives

    def observed(self) -> Observed:
        """What the run modes did on the first step, as Step saw it."""
        return self.step.observed()

    def profiler(self) -> StepProfiler:
        """--profile's steps, timed by phase (see profile.py)."""
        return StepProfiler(self.step, self.synchronize)

    # --- checkpoint: the module's and optimizer's state by parameter name, torch.save from one
    # process, DCP's shards from a process group (see checkpoint.py)
    def save_checkpoint(self, folder: Path) -> None:
        checkpoint.save(folder, self.module, self.optimizer, self.step.scaler, self.rank)

    def load_checkpoint(self, folder: Path) -> None:
        checkpoint.load(folder, self.module, self.optimizer, self.step.scaler, self.rank)

    # the same state in the contract's terms, which any framework reads (see portable.py)
    def portable_state(self, step: int) -> TrainingState:
        return portable.portable_state(self.module, self.optimizer, self.rule, step)

    def load_portable(self, state: TrainingState) -> None:
        portable.load_portable(self.module, self.optimizer, state)

    def teardown(self, failed: bool) -> None:
        pass  # no process group to release
