"""The base of every task (parbench.contract.tasks has the tasks and their registry): what
a task declares, its quality figures and the figures a run can be timed to."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from parbench.base.options import Bounds, Option

from .data import Dataset
from .spec import ModelSpec, build_spec


@dataclass(frozen=True)
class Quality:
    """One quality figure a task's records carry: what the report, the headline, the CSV and
    "did N devices change the result" show of it."""

    column: str  # the report's column
    key: str  # the record's ``metrics`` key that holds the final figure
    unit: str  # what it counts in ("" for a plain number)
    better: str | None  # "higher" or "lower"; None for a reference that is no result (a floor)
    judged: bool = False  # whether "did N devices change the result" judges its change
    # (row, column) in that section's grid of changes, for a task with many judged figures
    # (the detector's P, R, F1 by split x object size); None: the long table only
    grid: tuple[str, str] | None = None


@dataclass(frozen=True)
class Target:
    """A figure of the task's evaluation that a run can be timed to and stopped at (--target,
    --target-metric): the first evaluation whose figure reaches the target's value ends the
    run."""

    metric: str  # the evaluation's key (and --target-metric's choice)
    better: str  # "higher" or "lower": which side of the value is reached
    bounds: Bounds  # the values a target of it can take
    unit: str

    def reached(self, figure: float, value: float) -> bool:
        return figure >= value if self.better == "higher" else figure <= value


@dataclass(frozen=True)
class Task(ABC):
    """One kind of learning problem, for a dataset of ``classes`` output classes (the label
    values, or a language model's vocabulary): the width of its models' output."""

    classes: int
    name: ClassVar[str]  # the record's task
    datasets: ClassVar[tuple[str, ...]]  # --dataset choices that are this task's
    data_kind: ClassVar[str]  # what its datasets are, for messages ("image datasets")
    # what --help says of a dataset beside its name, where its name does not say it
    dataset_notes: ClassVar[dict[str, str]] = {}
    # what every record of a run on the dataset notes (its figures' meaning), by dataset
    record_notes: ClassVar[dict[str, str]] = {}
    # --data-dir for the datasets that need one: "folder" or "file"
    data_paths: ClassVar[dict[str, str]] = {}
    models: ClassVar[tuple[str, ...]]  # --model choices that are this task's
    options: ClassVar[tuple[Option, ...]] = ()  # run options of its own (its datasets')
    inputs: ClassVar[str]  # what a model reads, and its dtype
    labels: ClassVar[str]  # what a row's label is, and its dtype
    loss: ClassVar[str]  # the training loss, as every framework must compute it
    unit: ClassVar[str]  # what throughput counts ("samples"/s)
    per_device_throughput: ClassVar[bool]  # the report adds the unit per second per device
    # its quality figures, the first the headline's; and how its own are made, for the notes
    quality: ClassVar[tuple[Quality, ...]]
    quality_note: ClassVar[str]
    # what --save-predictions writes (Task.predictions); None: the task has no predictions
    prediction_format: ClassVar[str | None] = None
    # the figures --target can be of, the first by default (see Target); none: no --target
    targets: ClassVar[tuple[Target, ...]] = ()
    # --preset NAME: option values (a model and its sizes, a batch) that a preset fills in
    # where the user gave none
    presets: ClassVar[dict[str, dict[str, object]]] = {}
    # the training recipe a run gets when the user sets no budget (no --steps, no --epochs):
    # its budget, and the default optimizer's lr and warm-up tuned for it, each where not given
    recipe: ClassVar[dict[str, object]] = {}
    # the metrics its records carry from schema ``record_since`` on, beyond every task's
    record_fields: ClassVar[tuple[str, ...]]
    record_since: ClassVar[int]
    # a small input shape its models accept, for parity's forward checks (fast, same graph)
    probe_input: ClassVar[tuple[int, ...]]
    # the final evaluation's figures the record keeps besides accuracy and loss, and those
    # each evaluation of the curve keeps
    final_fields: ClassVar[tuple[str, ...]]
    curve_fields: ClassVar[tuple[str, ...]]
    default_dataset: ClassVar[str]  # what --dataset is when only --model is given
    default_optimizer: ClassVar[str]  # and --optimizer
    # the evaluation curve the report plots: (key of each evaluation, axis label), and whether
    # its x axis counts the throughput unit seen (tokens) instead of steps
    curve_metric: ClassVar[tuple[str, str]]
    curve_by_items: ClassVar[bool]
    quality_columns: ClassVar[dict[str, str]]  # column -> metrics key, from ``quality``
    judged: ClassVar[tuple[str, ...]]  # the columns whose change is judged, from ``quality``

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if "quality" in cls.__dict__:
            cls.quality_columns = {q.column: q.key for q in cls.quality}
            cls.judged = tuple(q.column for q in cls.quality if q.judged)

    @classmethod
    @abstractmethod
    def load(cls, dataset: str, data_dir: Path | None, options: dict) -> Dataset:
        """One of its datasets, read or generated; ``options``: the values of its ``options``
        (None where not given). DatasetError names a file that cannot be read."""

    @classmethod
    @abstractmethod
    def from_data(cls, dataset: Dataset) -> Task:
        """The task for a dataset, from what the dataset says it holds."""

    @classmethod
    def option_problem(cls, dataset: str, given: dict) -> str | None:
        """What is wrong with its options given for ``dataset`` before any data is read."""
        return None

    @classmethod
    def target_of(cls, metric: str | None) -> Target:
        """The target figure --target-metric names (None: the task's first); ValueError for a
        figure the task has no target of."""
        if not cls.targets:
            raise ValueError(f"--target: {cls.name} has no figure a run can be timed to")
        if metric is None:
            return cls.targets[0]
        for target in cls.targets:
            if target.metric == metric:
                return target
        raise ValueError(f"--target-metric {metric}: {cls.name} has no {metric} to reach; "
                         f"its targets: {', '.join(t.metric for t in cls.targets)}")

    def unreachable(self, target: Target, value: float) -> str | None:
        """Why the data itself rules a target out (a loss below the data's floor), or None."""
        return None

    def predictions(self, totals: np.ndarray) -> dict[str, list[dict]] | None:
        """Every test row's predictions from the counts summed over every rank, per split, in
        a format other tools read (``--save-predictions``); None: the task has none to save."""
        return None

    def extra_metrics(self, final: dict) -> dict:
        """What the record's metrics add to the final evaluation's figures: nothing here."""
        return {}

    def spec_for(self, model: str, input_shape: tuple[int, ...],
                 sizes: dict[str, int] | None = None) -> ModelSpec:
        """The spec of a named model of this task for inputs of ``input_shape`` (one row's),
        with the ``sizes`` the user gave (see build_spec)."""
        return build_spec(model, input_shape, self.classes, sizes)

    @abstractmethod
    def probe_batch(self, rows: int, rng: np.random.Generator) -> np.ndarray:
        """``rows`` random inputs of ``probe_input``'s shape, for parity's forward checks."""

    def items(self, rows: int) -> int:
        """What ``rows`` training rows count in throughput's unit (one sample each here)."""
        return rows

    @property
    def count_size(self) -> int:
        """The length of the vector of evaluation counts that ranks sum."""
        return len(self.eval_counts(np.zeros(0, np.int64), np.zeros(0, np.int64), 0.0))

    @abstractmethod
    def eval_counts(self, labels: np.ndarray, outputs: np.ndarray,
                    loss_sum: float) -> np.ndarray:
        """The evaluation counts of some test rows, from their labels, the model's outputs
        (what a strategy's ``evaluate`` returns for them) and their summed loss: counts of
        several chunks and ranks add up."""

    @abstractmethod
    def eval_scores(self, totals: np.ndarray) -> dict:
        """The evaluation's figures from the counts summed over every chunk and rank:
        ``accuracy``, ``loss`` (the mean over rows), ``count`` (rows scored) and the task's
        own."""
