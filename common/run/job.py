"""The job file: everything a worker process needs, written by the harness as JSON."""

from __future__ import annotations

import json
import os
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

from parbench.contract.optim import OptimizerSpec
from parbench.contract.spec import ModelSpec, spec_from_dict
from parbench.contract.tasks import TASKS, Task

from .checkpoint import Checkpoints
from .modes import Modes

PREDICTIONS_FILE = "predictions.json"  # in the workdir: the last evaluation's predictions
STOP_FILE = "stop"  # in the workdir: the harness asks a checkpointing run to stop (preemption)
FAULT_ENV = "PARBENCH_TEST_FAULT"  # test-only: "crash|exit|hang|kill|stop:RANK:STEP" breaks a rank


@dataclass
class Job:
    backend: str
    launcher: str
    world_size: int  # devices (replicas) that train
    threads: int  # compute threads per worker process
    model: dict  # spec_dict(ModelSpec)
    dataset: str
    task_name: str  # a name of parbench.contract.tasks.TASKS
    task_fields: dict  # the task's own fields (its classes, a language's context, ...)
    global_batch: int
    total_steps: int  # the contract's steps; with --epochs a native loader's may differ
    optimizer: dict  # asdict(OptimizerSpec), lr already scaled
    seed: int
    workdir: str  # this run's folder: job.json, rank files, progress, launcher logs
    shared: str  # inputs shared by every run of a configuration: data/ and weights.npz
    save_weights: bool = False  # rank 0 exports final weights to workdir/final_weights.npz
    # rank 0 writes each evaluation's predictions to workdir/PREDICTIONS_FILE, the last kept
    save_predictions: bool = False
    profile_steps: list[int] | None = None  # --profile: [first, stop) of the profiled steps
    modes: Modes = Modes()
    epochs: int | None = None  # --epochs (None with --steps): passes of the run's feed
    eval_every: int | None = None  # steps between evaluations (None: at every epoch's end)
    target: float | None = None  # --target: the run stops at an evaluation that reaches it
    target_metric: str | None = None  # the task's figure it is of (None: the task's first)
    verbose: bool = False
    extra: dict = field(default_factory=dict)
    nnodes: int = 1  # a multi-node run: world_size counts every node's devices
    node_rank: int = 0
    cluster: list[str] | None = None  # tf-config on several nodes: every worker's HOST:PORT
    checkpoints: dict | None = None  # asdict(parbench.run.checkpoint.Checkpoints), if any
    # parbench convert: load the checkpoint checkpoints.resume_from names and write it portable
    # (parbench.run.convert) instead of training
    export_portable: bool = False

    @property
    def first_rank(self) -> int:
        """The global rank of this node's first process (ranks are numbered node by node)."""
        return self.node_rank * (self.world_size // self.nnodes)

    @property
    def task(self) -> Task:
        return TASKS[self.task_name](**self.task_fields)

    @property
    def spec(self) -> ModelSpec:
        return spec_from_dict(self.model)

    @property
    def optimizer_spec(self) -> OptimizerSpec:
        return OptimizerSpec(**self.optimizer)

    @property
    def checkpoint_plan(self) -> Checkpoints | None:
        return None if self.checkpoints is None else Checkpoints(**self.checkpoints)

    @property
    def stop_asked(self) -> bool:
        """Whether the harness asked this run to stop (STOP_FILE): a signal came to it."""
        return (self.path / STOP_FILE).exists()

    @property
    def path(self) -> Path:
        return Path(self.workdir)

    @property
    def data_path(self) -> Path:
        return Path(self.shared) / "data"

    @property
    def weights_path(self) -> Path:
        return Path(self.shared) / "weights.npz"

    def save(self) -> Path:
        target = self.path / "job.json"
        fields = {**asdict(self), "modes": self.modes.as_dict()}
        target.write_text(json.dumps(fields, indent=1))
        return target

    @classmethod
    def load(cls, path: str | os.PathLike) -> Job:
        fields = json.loads(Path(path).read_text())
        return cls(**{**fields, "modes": Modes(**fields["modes"])})


def write_error(job: Job, who: str) -> None:
    """Keep the traceback being handled where the harness looks first: with several workers,
    the first error written is the cause and the others are its echoes."""
    folder = job.path / "errors"
    folder.mkdir(exist_ok=True)
    (folder / f"{time.time():.6f}-{who}.txt").write_text(f"{who}: {traceback.format_exc()}")
