"""The task layer on JAX's side (parbench.contract.tasks): for each task, the training loss
and the evaluation's outputs, computed from a model's outputs and the labels, written once.

``model.loss_fn`` and ``model.evaluate`` put a model's forward in front of them; every strategy
takes its run's task from ``loss_for(job.task)``, so nothing else in frameworks/jax assumes
image classification. A task here holds no arrays and hashes by identity: a jitted function may
close over it or take it as a static argument. Every loss is written against the contract's
layouts (a detector's maps NCHW, as torch's), so each reads its channels where torch's does.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from parbench.contract import detection
from parbench.contract import tasks as contract


class TaskLoss(ABC):
    """What JAX computes for one task of parbench.contract.tasks from a model's outputs and
    the labels of the same rows; traceable."""

    name: ClassVar[str]  # the contract task's name (Task.name, the job's task_name)
    # what the host takes the evaluation's outputs as (strategy.evaluate): the dtype torch's
    # evaluation hands the contract task's eval_counts, so both score the same arrays
    outputs_dtype: ClassVar[type]

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

    outputs_dtype: ClassVar[type] = np.int64  # class or token indices, as torch's argmax

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


class ObjectDetection(TaskLoss):
    """contract.ObjectDetection: CenterNet's penalty-reduced focal loss on the heat map plus
    the weighted L1 of size and offset at the face centres, per image over its centres, the
    mean over images (torch's ObjectDetectionLoss, term for term); an evaluation returns the
    raw maps, one [5, H/4, W/4] per row, which the contract task decodes and scores on the
    host. The outputs are the model's NCHW maps, the labels the contract's NCHW float32
    [rows, 7, H/4, W/4] (parbench.contract.detection's channels)."""

    name: ClassVar[str] = contract.ObjectDetection.name
    outputs_dtype: ClassVar[type] = np.float32  # the maps, decoded on the host

    def per_image_loss(self, outputs: jax.Array, labels: jax.Array) -> jax.Array:
        """[rows]: each image's loss over its own centres (at least 1), so N devices' mean of
        their images' losses is one device's (contract.ObjectDetection)."""
        outputs = outputs.astype(jnp.float32)  # the loss in float32 under every precision
        logit, heat, centre = outputs[:, 0], labels[:, detection.HEAT], labels[:, detection.MASK]
        p = jax.nn.sigmoid(logit)
        # the logs as log-sigmoids, as torch's logsigmoid: finite at any logit, no clamp
        at_centre = -(1 - p) ** detection.FOCAL_ALPHA * jax.nn.log_sigmoid(logit) * centre
        elsewhere = (-(1 - heat) ** detection.FOCAL_BETA * p ** detection.FOCAL_ALPHA
                     * jax.nn.log_sigmoid(-logit) * (1 - centre))
        size = jnp.abs(outputs[:, 1:3] - labels[:, detection.SIZE_W:detection.SIZE_H + 1])
        offset = jnp.abs(outputs[:, 3:5] - labels[:, detection.OFFSET_X:detection.OFFSET_Y + 1])
        regression = jnp.sum(detection.SIZE_WEIGHT * size + offset, axis=1) * centre
        total = jnp.sum(at_centre + elsewhere + regression, axis=(1, 2))
        return total / jnp.maximum(jnp.sum(centre, axis=(1, 2)), 1.0)

    def mean_loss(self, outputs: jax.Array, labels: jax.Array) -> jax.Array:
        return jnp.mean(self.per_image_loss(outputs, labels))

    def evaluation(self, outputs: jax.Array, labels: jax.Array) -> tuple[jax.Array, jax.Array]:
        return outputs.astype(jnp.float32), jnp.sum(self.per_image_loss(outputs, labels))


IMPLEMENTED: dict[str, TaskLoss] = {task.name: task for task in (ImageClassification(),
                                                                 LanguageModeling(),
                                                                 ObjectDetection())}


def loss_for(task: contract.Task) -> TaskLoss:
    """JAX's loss and evaluation for the run's task (``job.task``); a task written in the
    contract but not here is an error that names the implemented ones."""
    if task.name not in IMPLEMENTED:
        raise ValueError(f"JAX has no loss and evaluation for task {task.name!r}; "
                         f"implemented: {', '.join(IMPLEMENTED)}")
    return IMPLEMENTED[task.name]
