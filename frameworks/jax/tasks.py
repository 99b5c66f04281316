"""The task layer on JAX's side (parbench.contract.tasks): for each task, the training loss
and the evaluation's outputs, computed from a model's outputs and the labels, written once.

``model.loss_fn`` and ``model.evaluate`` put a model's forward in front of them; every strategy
takes its run's task from ``loss_for(job.task)``, so nothing else in frameworks/jax assumes
image classification. A task here holds no arrays and hashes by identity: a jitted function may
close over it or take it as a static argument.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import jax
import jax.numpy as jnp

from parbench.contract import tasks as contract


class TaskLoss(ABC):
    """What JAX computes for one task of parbench.contract.tasks from a model's outputs and
    the labels of the same rows; traceable."""

    name: ClassVar[str]  # the contract task's name (Task.name, the job's task_name)

    @abstractmethod
    def mean_loss(self, outputs: jax.Array, labels: jax.Array) -> jax.Array:
        """The training loss the contract task describes (``Task.loss``): the mean over the
        rows given."""

    @abstractmethod
    def evaluation(self, outputs: jax.Array, labels: jax.Array) -> tuple[jax.Array, jax.Array]:
        """(the outputs the contract task's ``eval_counts`` scores, one per row; the loss
        summed over the rows), from inference-mode outputs."""


def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Softmax cross-entropy of each label against the logits' last axis, in the labels'
    shape (torch's ``F.cross_entropy(reduction="none")``): [rows, classes] against [rows], or
    [rows, T, vocab] against [rows, T]: every leading axis indexes labels alike, so the
    positions need no flattening into rows."""
    log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    picked = jnp.take_along_axis(log_probs, labels[..., None].astype(jnp.int32), axis=-1)
    return -picked[..., 0]


class SoftmaxCrossEntropy(TaskLoss, ABC):
    """A task whose model gives logits over the last axis and whose labels index them, one per
    row (images) or per position (tokens): the loss is the mean softmax cross-entropy over
    every label, an evaluation's output the arg max at every label. Both tasks below are this,
    written once: ``cross_entropy`` takes any leading axes."""

    def mean_loss(self, logits: jax.Array, labels: jax.Array) -> jax.Array:
        return jnp.mean(cross_entropy(logits, labels))

    def evaluation(self, logits: jax.Array, labels: jax.Array) -> tuple[jax.Array, jax.Array]:
        return jnp.argmax(logits, axis=-1), jnp.sum(cross_entropy(logits, labels))


class ImageClassification(SoftmaxCrossEntropy):
    """contract.ImageClassification: one logit per class; the loss is the softmax cross-entropy
    against the class, the mean over the rows (what torch's ``CrossEntropyLoss`` computes); an
    evaluation scores each row's predicted class (the arg max)."""

    name: ClassVar[str] = contract.ImageClassification.name


class LanguageModeling(SoftmaxCrossEntropy):
    """contract.LanguageModeling: one logit per vocabulary entry at every position; the loss
    is the softmax cross-entropy of every position against its next token, the mean over rows
    and positions (torch's ``CrossEntropyLoss`` on both flattened into rows: the same mean,
    every row having the same positions); an evaluation scores the predicted next token at
    every position (the arg max over the vocabulary), [rows, T]."""

    name: ClassVar[str] = contract.LanguageModeling.name


IMPLEMENTED: dict[str, TaskLoss] = {task.name: task for task in (ImageClassification(),
                                                                 LanguageModeling())}


def loss_for(task: contract.Task) -> TaskLoss:
    """JAX's loss and evaluation for the run's task (``job.task``); a task written in the
    contract but not here is an error that names the implemented ones."""
    if task.name not in IMPLEMENTED:
        raise ValueError(f"JAX has no loss and evaluation for task {task.name!r}; "
                         f"implemented: {', '.join(IMPLEMENTED)}")
    return IMPLEMENTED[task.name]
