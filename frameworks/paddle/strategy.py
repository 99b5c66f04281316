"""PaddleStrategy, the base class of the Paddle strategies (parbench.run.loop.Strategy): the
constructor every strategy follows, and what they all do alike once built.

The constructor is a template: threads and seed, this process's device (``setup_device``: a
strategy with a process group joins it there), peak memory counters reset, which rows this
process reads (``data_shard``), the canonical weights loaded into the model, the run modes
applied to the bare model (ModelModes: --sync-bn across the processes, --compile's to_static),
the model wrapped (``wrap``: DataParallel), the run's optimizer and --clip-grad-norm, then the
TrainStep in the run's modes (pausing gradient communication with ``hold_gradients`` for all but
the last micro-batch). A strategy file overrides only those hooks, and what else differs (its
loader, the sum across processes, its record, its profiler, the release of its process group),
so it shows what its strategy adds.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import numpy as np
import paddle
from paddle import nn

from parbench.contract.data import Dataset
from parbench.contract.weights import load_weights
from parbench.run.footprint import Communication, StateBytes
from parbench.run.job import Job
from parbench.run.modes import Observed
from parbench.run.portable import TrainingState

from . import checkpoint, optim, portable, runtime
from .input import LoaderFeed
from .model import build_model, export_weights, model_notes
from .modes import ModelModes
from .profile import StepProfiler
from .tasks import loss_for

NOT_COUNTED = ("not counted: paddle.DataParallel's gradient all-reduce is issued by its C++ "
               "reducer, which exposes no per-collective hook")


class PaddleStrategy(ABC):
    """What every Paddle strategy does alike; a subclass supplies the hooks of its constructor
    (see the module's docstring) and overrides what else differs. ``device``: use_device's;
    ``module``: the bare Layer (canonical parameter names), what the optimizer updates and the
    weights are exported from; ``model``: what training calls (the module wrapped); ``step``:
    its TrainStep; ``notes``: for the record."""

    def __init__(self, job: Job):
        self.task_loss = loss_for(job.task)  # first: a task Paddle lacks fails before setup
        runtime.setup_threads(job)
        self.modes = job.modes
        self.device = self.setup_device(job)
        runtime.reset_peak_memory([self.device])
        self.rank, self.num_processes = self.data_shard(job)
        self.module: nn.Layer = build_model(job.spec, load_weights(job.weights_path))
        # before the wrapper and the optimizer see the model (see ModelModes)
        self.model_modes = ModelModes(self.module, self.modes, replicas=self.num_processes)
        self.model: nn.Layer = self.wrap(self.module)
        self.rule = job.optimizer_spec
        self.optimizer = optim.make_optimizer(self.module, self.rule, job.spec)
        self.model, self.optimizer = self.shard(self.model, self.optimizer)
        self.step = runtime.TrainStep(self.model, self.optimizer, self.modes, self.task_loss,
                                      optim.clipper(self.module, job.optimizer_spec),
                                      no_sync=self.hold_gradients)
        self.notes: list[str] = model_notes(job.spec) + self.model_modes.notes

    # The constructor's hooks, in the order it calls them.

    @abstractmethod
    def setup_device(self, job: Job) -> str:
        """This process's device, made current (after joining its process group, if it has
        one): runtime.use_device's."""

    def data_shard(self, job: Job) -> tuple[int, int]:
        """(this process's rank, the processes that read data): one process reads every row of
        each global batch."""
        return 0, 1

    @abstractmethod
    def wrap(self, module: nn.Layer) -> nn.Layer:
        """What training calls: the module (its run modes applied), wrapped by the strategy."""

    def shard(self, model: nn.Layer, optimizer: paddle.optimizer.Optimizer
              ) -> tuple[nn.Layer, paddle.optimizer.Optimizer]:
        """The model and optimizer as the step uses them: as they are (a sharded strategy
        splits the optimizer state, the gradients and perhaps the parameters here)."""
        return model, optimizer

    def hold_gradients(self) -> AbstractContextManager:
        """Around the forward and backward of every micro-batch but the last: no gradient
        communication to pause here (DataParallel's no_sync)."""
        return nullcontext()

    # What the loop calls (parbench.run.loop.Strategy).

    @abstractmethod
    def native_feed(self, job: Job, data: Dataset) -> LoaderFeed:
        """--input native: this process's batches from a paddle.io DataLoader (see input.py)."""

    def train_step(self, x: runtime.Rows, y: runtime.Rows, lr: float) -> float:
        return self.step(x, y, lr)

    def evaluate(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
        """On the bare module: evaluation has no backward, so no gradient to all-reduce."""
        return runtime.evaluate(self.module, x, y, self.modes, self.task_loss)

    def all_reduce_sum(self, values: np.ndarray) -> np.ndarray:
        return values  # one process

    def synchronize(self) -> None:
        runtime.synchronize(self.device)

    def peak_device_mb(self) -> list[float] | None:
        return runtime.peak_device_mb([self.device])

    def export_weights(self) -> dict[str, np.ndarray]:
        return export_weights(self.module)

    def describe(self) -> dict:
        return runtime.describe([self.device], self.notes)

    def observed(self) -> Observed:
        """What --precision, --compile, --sync-bn and --grad-accum did on the first step, and
        how many steps --clip-grad-norm clipped."""
        return self.model_modes.observed(self.step.micro_batches, self.step.clipped_steps)

    def state_bytes(self) -> list[StateBytes]:
        return [runtime.state_bytes(self.module, self.optimizer)]

    def step_communication(self) -> Communication:
        return Communication(NOT_COUNTED, None)

    def profiler(self) -> StepProfiler:
        """--profile's steps, timed by phase (see profile.py)."""
        return StepProfiler(self.step, self.synchronize)

    # --- checkpoint: paddle.save of rank 0's Layer and optimizer state_dicts (replicated by
    # DataParallel), and each rank's own BatchNorm statistics, loss scale and random state
    # (see checkpoint.py)
    def save_checkpoint(self, folder: Path) -> None:
        checkpoint.save(folder, self.module, self.optimizer, self.step.scaler, self.rank,
                        self.device)

    def load_checkpoint(self, folder: Path) -> None:
        checkpoint.load(folder, self.module, self.optimizer, self.step.scaler, self.rank,
                        self.device)

    # the same state in the contract's terms, which any framework reads (see portable.py)
    def portable_state(self, step: int) -> TrainingState:
        return portable.portable_state(self.module, self.optimizer, self.rule, step)

    def load_portable(self, state: TrainingState) -> None:
        portable.load_portable(self.module, self.optimizer, self.rule, state)

    def teardown(self, failed: bool) -> None:
        pass  # no process group to release
