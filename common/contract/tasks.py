"""Tasks: what is learnt, as every framework and the report must agree on it.

A task owns what differs between kinds of learning problem, so the rest of parbench does not
assume one: which datasets and models belong to it, what a model reads and what the labels are
(the input description), the loss every framework writes once for it, how an evaluation is
scored and how its counts are summed across ranks (each rank scores its part of the test set,
the counts are all-reduced, then the scores are computed from the sums, so N ranks score
exactly what one would), what a step's throughput counts, and which metrics the report shows.

Three tasks: image classification; causal language modelling (windows of tokens, each position
predicting the next token; throughput counts tokens, evaluation scores loss per token,
perplexity and next-token accuracy); and object detection, in a module of its own
(parbench.contract.detection_task; the base every task shares is parbench.contract.task).

A task also owns its datasets' options (``options``: flags, config keys and bounds derive from
them, parbench.base.options), how its datasets are read (``load``) and what a dataset tells it
(``from_data``), and its quality figures (``quality``: the record's keys, units, which way is
better, which the change N devices make is judged on), which the report, the headline, the CSV,
the schema's rules for its records and ``parbench explain`` all read from here. A new task is a
subclass registered in TASKS that lists its own models (each named model belongs to exactly one
task: check_models), plus its loss and evaluation in each framework's ``tasks.py``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from parbench.base.options import ACCURACY, POSITIVE, Bounds, Option

from .data import DATASET_NAMES, NEEDS_DATA_DIR, Dataset, load_dataset
from .detection_task import ObjectDetection
from .language import LANGUAGE_DATASETS, MARKOV_MAX_VOCAB, load_language
from .spec import MODELS
from .task import Quality, Target, Task

# Each task lists its named models (contract/spec.py MODELS) itself: a model no task lists, or
# one that two tasks list, is refused when this module is imported (check_models), so a new
# task's model cannot fall to another task by default.
IMAGE_MODELS = ("resnet", "resnet-nonorm", "resnet50", "mlp", "vit")
LANGUAGE_MODELS = ("gpt",)
# Records before schema 7 name no task: they are image classification, the only task then.
TASK_BEFORE_SCHEMA_7 = "image-classification"
# A confusion matrix is classes**2 counts: at ImageNet's 1000 classes 7 MB of JSON in every
# record (measured), so above this the record keeps the macro scores and no matrix (schema 14)
CONFUSION_MATRIX_MAX_CLASSES = 100


@dataclass(frozen=True)
class ImageClassification(Task):
    """Images to one of ``classes`` classes. Inputs: NCHW float32 images (parbench.contract.data
    standardises them); labels: int64 class indices; a model's output: one logit per class; the
    loss: softmax cross-entropy, the mean over the rows; evaluation: the predicted class of
    each row (the arg max), scored by a confusion matrix (rows: true classes, columns:
    predicted ones) summed across ranks, so accuracy and the macro scores come from the same
    counts."""

    name: ClassVar[str] = "image-classification"
    datasets: ClassVar[tuple[str, ...]] = DATASET_NAMES
    data_kind: ClassVar[str] = "image datasets"
    dataset_notes: ClassVar[dict[str, str]] = {
        "synthetic-hard": "where accuracy, precision and recall can change: about 0.85 at the "
                          "default budget",
        "random-images": "noise at 3x224x224, 1000 classes, for speed and memory"}
    record_notes: ClassVar[dict[str, str]] = {
        "random-images": "random inputs (standard normal pixels, uniform labels): this run "
                         "measures speed and memory, not learning; accuracy stays at chance"}
    data_paths: ClassVar[dict[str, str]] = {name: "folder" for name in NEEDS_DATA_DIR}
    models: ClassVar[tuple[str, ...]] = IMAGE_MODELS
    inputs: ClassVar[str] = "images, NCHW float32"
    labels: ClassVar[str] = "class indices, int64"
    loss: ClassVar[str] = "softmax cross-entropy of the logits against the class, mean over rows"
    unit: ClassVar[str] = "samples"
    per_device_throughput: ClassVar[bool] = False
    quality: ClassVar[tuple[Quality, ...]] = (
        Quality("accuracy", "final_accuracy", "fraction", "higher", judged=True),
        Quality("Precision macro", "precision_macro", "fraction", "higher", judged=True),
        Quality("Recall macro", "recall_macro", "fraction", "higher", judged=True),
        Quality("F1 macro", "f1_macro", "fraction", "higher", judged=True),
        Quality("loss", "final_loss", "nats per row", "lower"))
    quality_note: ClassVar[str] = (
        "Precision, Recall and F1 macro: unweighted means over classes of the final "
        "evaluation's per-class scores, from the confusion matrix summed across ranks (a class "
        "never predicted scores precision 0).")
    record_fields: ClassVar[tuple[str, ...]] = ("precision_macro", "recall_macro", "f1_macro",
                                                "confusion_matrix")
    record_since: ClassVar[int] = 3
    final_fields: ClassVar[tuple[str, ...]] = ("precision_macro", "recall_macro", "f1_macro",
                                               "confusion_matrix")
    curve_fields: ClassVar[tuple[str, ...]] = ("precision_macro", "recall_macro", "f1_macro")
    probe_input: ClassVar[tuple[int, ...]] = (3, 16, 16)
    default_dataset: ClassVar[str] = "synthetic"
    default_optimizer: ClassVar[str] = "sgd"
    curve_metric: ClassVar[tuple[str, str]] = ("accuracy", "test accuracy")
    curve_by_items: ClassVar[bool] = False
    # medium: a ViT (with AdamW, as vision transformers are trained) whose matmuls, not the
    # frameworks' per-step overhead, take most of a step on a CPU: single backends reached 33
    # to 67 % of their measured matmul peaks, torch 61 % (the default resnet 11 to 22 %;
    # benchmarks/utilisation.py --medium, 2 AMD EPYC vCPUs, 2026-12-03; docs/results.md)
    # vit-b16 and resnet50: the published sizes (PUBLISHED), on random images at ImageNet's
    # shape: 86,567,656 and 25,557,032 parameters, 17.56 and 4.09 GMACs a forward per image
    presets: ClassVar[dict[str, dict[str, object]]] = {
        "medium": {"model": "vit", "width": 192, "depth": 2, "heads": 4, "optimizer": "adamw"},
        "vit-b16": {"model": "vit", "dataset": "random-images", "patch": 16, "width": 768,
                    "depth": 12, "heads": 12, "optimizer": "adamw"},
        "resnet50": {"model": "resnet50", "dataset": "random-images"}}
    targets: ClassVar[tuple[Target, ...]] = (
        Target("accuracy", "higher", ACCURACY, "fraction of the test set"),
        Target("loss", "lower", POSITIVE, "nats per test row"))

    @classmethod
    def load(cls, dataset: str, data_dir: Path | None, options: dict) -> Dataset:
        return load_dataset(dataset, data_dir)

    @classmethod
    def from_data(cls, dataset: Dataset) -> ImageClassification:
        return cls(dataset.holds["classes"])

    def probe_batch(self, rows: int, rng: np.random.Generator) -> np.ndarray:
        return rng.normal(0, 1, (rows, *self.probe_input)).astype(np.float32)

    def eval_counts(self, labels: np.ndarray, outputs: np.ndarray,
                    loss_sum: float) -> np.ndarray:
        """The confusion matrix of these rows (``outputs``: each row's predicted class),
        flattened, then the loss sum."""
        return np.append(confusion_matrix(labels, outputs, self.classes).ravel(), loss_sum)

    def eval_scores(self, totals: np.ndarray) -> dict:
        confusion = np.rint(totals[:-1]).astype(np.int64).reshape(self.classes, self.classes)
        count = int(confusion.sum())
        return {"accuracy": float(np.trace(confusion)) / count, "loss": float(totals[-1]) / count,
                "count": count, **macro_scores(confusion),
                "confusion_matrix": confusion.tolist()
                if self.classes <= CONFUSION_MATRIX_MAX_CLASSES else None}


CONTEXT = Bounds(1, 4096)  # tokens a row reads
VOCABULARY = Bounds(2, 1_000_000)  # markov's own limit: LanguageModeling.option_problem


@dataclass(frozen=True)
class LanguageModeling(Task):
    """Causal language modelling over a vocabulary of ``classes`` tokens, rows of ``context``
    positions. Inputs: int64 token ids [rows, context]; labels: the next token at every
    position, int64 [rows, context]; a model's output: one logit per vocabulary entry at every
    position; the loss: softmax cross-entropy at every position, the mean over rows and
    positions (each row has ``context`` of them, so N ranks' mean of means is the global one);
    evaluation: the predicted next token at every position (the arg max), scored by counts of
    right tokens, tokens and the summed loss, so loss per token, perplexity and accuracy come
    from the sums across ranks."""

    context: int = 1
    loss_floor: float | None = None  # nats per token, where the data's is known
    name: ClassVar[str] = "language-modeling"
    datasets: ClassVar[tuple[str, ...]] = LANGUAGE_DATASETS
    data_kind: ClassVar[str] = "token datasets"
    dataset_notes: ClassVar[dict[str, str]] = {
        "markov": "a synthetic language with a known loss floor",
        "random-tokens": "uniform random tokens, for speed and memory (floor ln(vocab))"}
    record_notes: ClassVar[dict[str, str]] = {
        "random-tokens": "random inputs (uniform, independent tokens): this run measures speed "
                         "and memory, not learning; no model gets below ln(vocab)"}
    data_paths: ClassVar[dict[str, str]] = {"text": "file"}
    models: ClassVar[tuple[str, ...]] = LANGUAGE_MODELS
    options: ClassVar[tuple[Option, ...]] = (
        Option("context", int, help="token datasets: tokens each row reads (64)",
               owner="task language-modeling", bounds=CONTEXT, inputs=True),
        Option("vocab", int, help="--dataset markov (at most 512) or random-tokens: the "
               "vocabulary (64)",
               owner="task language-modeling", bounds=VOCABULARY, inputs=True))
    inputs: ClassVar[str] = "token ids, int64 [rows, context]"
    labels: ClassVar[str] = "the next token at every position, int64 [rows, context]"
    loss: ClassVar[str] = ("softmax cross-entropy of every position's logits against its next "
                           "token, mean over rows and positions")
    unit: ClassVar[str] = "tokens"
    per_device_throughput: ClassVar[bool] = True
    quality: ClassVar[tuple[Quality, ...]] = (
        Quality("val loss", "final_loss", "nats per token", "lower", judged=True),
        Quality("loss floor", "loss_floor", "nats per token", None),
        Quality("gap to floor", "floor_gap", "nats per token", "lower"),
        Quality("perplexity", "perplexity", "", "lower"),
        Quality("next-token acc.", "final_accuracy", "fraction", "higher"))
    quality_note: ClassVar[str] = (
        "val loss: mean cross-entropy per validation token, nats; perplexity: its exp; loss "
        "floor: the lowest expected loss any model can reach on the data (computed exactly for "
        "the synthetic Markov language, unknown for a text file); gap: val loss - floor.")
    record_fields: ClassVar[tuple[str, ...]] = ("perplexity", "tokens", "loss_floor",
                                                "floor_gap", "items_per_step")
    record_since: ClassVar[int] = 7
    final_fields: ClassVar[tuple[str, ...]] = ("perplexity", "tokens")
    curve_fields: ClassVar[tuple[str, ...]] = ("perplexity",)
    probe_input: ClassVar[tuple[int, ...]] = (16,)
    default_dataset: ClassVar[str] = "markov"
    default_optimizer: ClassVar[str] = "adamw"
    curve_metric: ClassVar[tuple[str, str]] = ("loss", "validation loss, nats")
    curve_by_items: ClassVar[bool] = True
    # Measured on 2 AMD EPYC vCPUs (2026-12-03): 20 epochs (640 steps of 128 windows) at lr
    # 0.01 after 32 warm-up steps end at validation loss 1.830 in every framework, 86 % of the
    # way from the uniform 4.159 to the floor 1.451, torch-single in about 80 s. The model
    # first learns the previous token alone (3.89 at best), then, after 200-250 steps, the one
    # before it; a short schedule decays first (2 epochs at lr 0.001 ended at 4.130).
    recipe: ClassVar[dict[str, object]] = {"epochs": 20, "lr": 0.01, "warmup_steps": 32}
    # medium: a GPT three times as wide: single backends reached 33 to 64 % of their measured
    # matmul peaks, torch 64 % (the default width 14 to 34 %; the ViT's run of the benchmark)
    # gpt2-small: the published size (PUBLISHED), tied embeddings, 124,439,808 parameters
    presets: ClassVar[dict[str, dict[str, object]]] = {
        "medium": {"model": "gpt", "width": 192, "depth": 2, "heads": 4},
        "gpt2-small": {"model": "gpt", "dataset": "random-tokens", "context": 1024,
                       "vocab": 50257, "width": 768, "depth": 12, "heads": 12}}
    targets: ClassVar[tuple[Target, ...]] = (
        Target("loss", "lower", POSITIVE, "nats per validation token"),
        Target("perplexity", "lower", Bounds(1, low_open=True), "exp(loss)"),
        Target("accuracy", "higher", ACCURACY, "next-token accuracy"))

    @classmethod
    def load(cls, dataset: str, data_dir: Path | None, options: dict) -> Dataset:
        return load_language(dataset, data_dir, options.get("context"), options.get("vocab"))

    @classmethod
    def from_data(cls, dataset: Dataset) -> LanguageModeling:
        return cls(dataset.holds["vocabulary"], dataset.input_shape[0],
                   dataset.holds.get("loss_floor"))

    @classmethod
    def option_problem(cls, dataset: str, given: dict) -> str | None:
        vocab = given.get("vocab")
        if vocab is not None and dataset == "text":
            return ("--vocab is the synthetic language's; --dataset text has byte tokens "
                    "(vocabulary 256)")
        if vocab is not None and dataset == "markov" and vocab > MARKOV_MAX_VOCAB:
            return (f"--vocab {vocab}: --dataset markov's table has vocab**3 entries, so at "
                    f"most {MARKOV_MAX_VOCAB}; --dataset random-tokens takes any vocabulary")
        return None

    def unreachable(self, target: Target, value: float) -> str | None:
        """A loss (or perplexity) under the language's floor: no model can reach it."""
        if self.loss_floor is None or target.metric not in ("loss", "perplexity"):
            return None
        floor = self.loss_floor if target.metric == "loss" else float(np.exp(self.loss_floor))
        if value < floor:
            return (f"--target {value} is below the language's floor for {target.metric} "
                    f"({floor:.4g}): no model can reach it")
        return None

    def probe_batch(self, rows: int, rng: np.random.Generator) -> np.ndarray:
        return rng.integers(0, self.classes, (rows, *self.probe_input), dtype=np.int64)

    def items(self, rows: int) -> int:
        """Tokens: every row predicts ``context`` of them."""
        return rows * self.context

    def eval_counts(self, labels: np.ndarray, outputs: np.ndarray,
                    loss_sum: float) -> np.ndarray:
        """Right tokens, tokens, rows, then the loss summed over every token."""
        labels = np.asarray(labels)
        right = np.count_nonzero(labels == np.asarray(outputs))
        return np.array([right, labels.size, len(labels), loss_sum], np.float64)

    def eval_scores(self, totals: np.ndarray) -> dict:
        right, tokens, rows, loss_sum = totals
        loss = float(loss_sum) / tokens
        return {"accuracy": float(right) / tokens, "loss": loss, "count": int(round(rows)),
                "tokens": int(round(tokens)), "perplexity": float(np.exp(min(loss, 700.0)))}

    def extra_metrics(self, final: dict) -> dict:
        """The floor beside the final validation loss, and the gap between them."""
        if self.loss_floor is None:
            return {"loss_floor": None, "floor_gap": None}
        return {"loss_floor": self.loss_floor, "floor_gap": final["loss"] - self.loss_floor}


# Every task, by its record name. A task added here (from its own module, before the command
# line is read) reaches the options, the parser, the record schema and the report.
TASKS: dict[str, type[Task]] = {task.name: task
                                for task in (ImageClassification, LanguageModeling,
                                             ObjectDetection)}


def model_problems(models: Iterable[str], tasks: Iterable[type[Task]]) -> list[str]:
    """What is wrong with which task owns which model, one line each (empty when every named
    model belongs to exactly one task and every task's model is a named one): the record, the
    defaults and the report find a run's task by its model."""
    tasks = tuple(tasks)
    owners = {model: [task.name for task in tasks if model in task.models] for model in models}
    found = [f"model {model!r} (parbench.contract.spec MODELS) belongs to no task: list it in "
             f"one task's models" for model, names in owners.items() if not names]
    found += [f"model {model!r} belongs to several tasks ({', '.join(names)}): list it in one"
              for model, names in owners.items() if len(names) > 1]
    found += [f"task {task.name} lists model {model!r}, which parbench.contract.spec MODELS "
              "lacks" for task in tasks for model in task.models if model not in owners]
    return found


def check_models() -> None:
    """Refuse a model of no task, of two tasks, or a task's model that is not named: called
    here, at import, and again where the option table is built, after any task added from a
    module of its own (ValueError: a mistake in parbench, not in a user's input)."""
    found = model_problems(MODELS, TASKS.values())
    if found:
        raise ValueError("; ".join(found))


check_models()


def task_of_model(model: str) -> type[Task]:
    """The task a named model belongs to; an unknown model is an error."""
    for task in TASKS.values():
        if model in task.models:
            return task
    raise ValueError(f"unknown model {model!r}; known: "
                     f"{', '.join(m for task in TASKS.values() for m in task.models)}")


def task_of_dataset(dataset: str) -> type[Task]:
    """The task a dataset is for; an unknown dataset is an error."""
    for task in TASKS.values():
        if dataset in task.datasets:
            return task
    raise ValueError(f"unknown dataset {dataset!r}")


def all_datasets() -> tuple[str, ...]:
    """Every task's datasets: the --dataset choices."""
    return tuple(d for task in TASKS.values() for d in task.datasets)


def preset_names() -> tuple[str, ...]:
    """Every task's preset names: --preset's choices."""
    return tuple(dict.fromkeys(name for task in TASKS.values() for name in task.presets))


# Presets of published models: every value but the optimizer is the model's published size or
# its input, so a run that gives another is refused (a "gpt2-small" of width 512 is not one)
PUBLISHED = ("gpt2-small", "vit-b16", "resnet50")
FREE_IN_PUBLISHED = ("optimizer",)


def with_task_defaults(values: dict, default_model: str) -> dict:
    """``values`` (a run's given options) with its --preset's values and its task's recipe
    filled in where not given; the task is the given model's, else the one task whose preset
    it is, else ``default_model``'s. ValueError for a preset the task lacks, one of another
    model than the one given, or a published one given other sizes."""
    model = values.get("model", _preset_model(values.get("preset")) or default_model)
    try:
        task = task_of_model(model)
    except ValueError:
        return values  # an unknown model: resolve refuses it, with the known ones
    filled = {**_preset(task, values), **values}
    if "steps" in filled or "epochs" in filled:
        return filled  # a budget of the user's own: the recipe's lr and warm-up are not for it
    optimizer_is_default = filled.get("optimizer", task.default_optimizer) \
        == task.default_optimizer
    recipe = {k: v for k, v in task.recipe.items() if optimizer_is_default or k == "epochs"}
    return {**recipe, **filled}


def _preset(task: type[Task], values: dict) -> dict:
    name = values.get("preset")
    if name is None:
        return {}
    if name not in task.presets:
        raise ValueError(f"--preset {name}: {task.name} has no such preset; its presets: "
                         f"{', '.join(task.presets) or 'none'}")
    preset = task.presets[name]
    model = values.get("model", preset.get("model"))
    if preset.get("model", model) != model:
        raise ValueError(f"--preset {name} of {task.name} trains --model {preset['model']}, "
                         f"not --model {model}; leave --model out or give {preset['model']}")
    if name in PUBLISHED:
        for key, fixed in preset.items():
            given = values.get(key)
            if key not in FREE_IN_PUBLISHED and given is not None and given != fixed:
                flag = "--" + key.replace("_", "-")
                raise ValueError(f"--preset {name} is the published size: its {flag} is "
                                 f"{fixed}, not {given}; leave {flag} out or give {fixed}")
    return preset


def _preset_model(name: str | None) -> str | None:
    """The model of the preset ``name`` where one task alone has it (medium: both do)."""
    owners = [task for task in TASKS.values() if name in task.presets]
    return owners[0].presets[name].get("model") if len(owners) == 1 else None


def target_metrics() -> tuple[str, ...]:
    """Every figure some task can be timed to: --target-metric's choices."""
    return tuple(dict.fromkeys(t.metric for task in TASKS.values() for t in task.targets))


def task_options() -> tuple[Option, ...]:
    """Every task's own options, in task order."""
    return tuple(option for task in TASKS.values() for option in task.options)


def record_rules() -> list[dict]:
    """The record schema's rules for each task's metrics: a record of the task, from the schema
    that first carried them, must hold its ``record_fields``. Records before schema 7 name no
    task and are image classification's."""
    rules = []
    for task in TASKS.values():
        condition = {"properties": {"task": {"const": task.name},
                                    "schema_version": {"minimum": task.record_since}}}
        if task.name != TASK_BEFORE_SCHEMA_7:  # a record with no task is not of this one
            condition["required"] = ["task"]
        metrics = {"if": {"type": "object"}, "then": {"required": list(task.record_fields)}}
        rules.append({"if": condition, "then": {"properties": {"metrics": metrics}}})
    return rules


def confusion_matrix(labels: np.ndarray, predicted: np.ndarray, classes: int) -> np.ndarray:
    """counts[true, predicted] over the given rows."""
    flat = np.asarray(labels, np.int64) * classes + np.asarray(predicted, np.int64)
    return np.bincount(flat, minlength=classes * classes).reshape(classes, classes)


def macro_scores(confusion: np.ndarray) -> dict[str, float]:
    """Macro-averaged precision, recall and F1: the unweighted mean over classes. A class never
    predicted has precision 0, one never present recall 0, and F1 0 where both are 0 (the
    zero_division=0 convention of scikit-learn)."""
    confusion = np.asarray(confusion, np.float64)
    hits = np.diag(confusion)
    predicted, present = confusion.sum(axis=0), confusion.sum(axis=1)
    precision = np.divide(hits, predicted, out=np.zeros_like(hits), where=predicted > 0)
    recall = np.divide(hits, present, out=np.zeros_like(hits), where=present > 0)
    both = precision + recall
    f1 = np.divide(2 * precision * recall, both, out=np.zeros_like(hits), where=both > 0)
    return {"precision_macro": float(precision.mean()), "recall_macro": float(recall.mean()),
            "f1_macro": float(f1.mean())}
