"""The task's loss and evaluation outputs in Paddle, written once per task (see
parbench.contract.tasks): the training step, the profiler's step and evaluation all take them
from here, so they compute the same loss."""

from __future__ import annotations

from typing import Protocol

import numpy as np
import paddle
import paddle.nn.functional as F

from parbench.contract import detection
from parbench.contract.tasks import ImageClassification, LanguageModeling, ObjectDetection, Task


class TaskLoss(Protocol):
    def mean_loss(self, outputs: paddle.Tensor, labels: paddle.Tensor) -> paddle.Tensor:
        """The training loss of a batch: the mean over its rows (a 0-d tensor, for backward)."""

    def evaluation(self, outputs: paddle.Tensor,
                   labels: paddle.Tensor) -> tuple[np.ndarray, float]:
        """(the per-row outputs the task scores, on the host; the loss summed over the rows)."""


class ImageClassificationLoss:
    """Softmax cross-entropy of the logits against the class; evaluation scores the predicted
    class of each row (ImageClassification.loss)."""

    def mean_loss(self, outputs: paddle.Tensor, labels: paddle.Tensor) -> paddle.Tensor:
        return F.cross_entropy(outputs, labels)

    def evaluation(self, outputs: paddle.Tensor,
                   labels: paddle.Tensor) -> tuple[np.ndarray, float]:
        loss_sum = float(F.cross_entropy(outputs, labels, reduction="sum"))
        return outputs.argmax(1).numpy(), loss_sum


class LanguageModelingLoss:
    """Softmax cross-entropy at every position against its next token, the mean over rows and
    positions; evaluation scores the predicted next token at every position
    (LanguageModeling.loss). Paddle's cross_entropy takes the classes in the last axis and
    labels of one rank less, so [rows, T, vocab] logits meet [rows, T] labels as they are; its
    mean is over every label, rows and positions alike."""

    def mean_loss(self, outputs: paddle.Tensor, labels: paddle.Tensor) -> paddle.Tensor:
        return F.cross_entropy(outputs, labels)

    def evaluation(self, outputs: paddle.Tensor,
                   labels: paddle.Tensor) -> tuple[np.ndarray, float]:
        loss_sum = float(F.cross_entropy(outputs, labels, reduction="sum"))
        return outputs.argmax(-1).numpy(), loss_sum


class ObjectDetectionLoss:
    """CenterNet's penalty-reduced focal loss on the heat map plus the weighted L1 of size and
    offset at the face centres, per image over its centres, the mean over images
    (ObjectDetection.loss); evaluation returns the raw maps, which the task decodes and
    scores. The logs are ``F.log_sigmoid`` of the logit, as torch's ``F.logsigmoid``: no
    ``log(sigmoid)``, which reaches -inf for a confident cell, and no clamp."""

    def per_image_loss(self, outputs: paddle.Tensor, labels: paddle.Tensor) -> paddle.Tensor:
        outputs = outputs.astype("float32")  # the loss in float32 under every precision
        logit, heat, centre = outputs[:, 0], labels[:, detection.HEAT], labels[:, detection.MASK]
        p = F.sigmoid(logit)
        at_centre = -(1 - p) ** detection.FOCAL_ALPHA * F.log_sigmoid(logit) * centre
        elsewhere = (-(1 - heat) ** detection.FOCAL_BETA * p ** detection.FOCAL_ALPHA
                     * F.log_sigmoid(-logit) * (1 - centre))
        size = (outputs[:, 1:3] - labels[:, detection.SIZE_W:detection.SIZE_H + 1]).abs()
        offset = (outputs[:, 3:5] - labels[:, detection.OFFSET_X:detection.OFFSET_Y + 1]).abs()
        regression = (detection.SIZE_WEIGHT * size + offset).sum(1) * centre
        total = (at_centre + elsewhere + regression).sum([1, 2])
        return total / centre.sum([1, 2]).clip(min=1)

    def mean_loss(self, outputs: paddle.Tensor, labels: paddle.Tensor) -> paddle.Tensor:
        return self.per_image_loss(outputs, labels).mean()

    def evaluation(self, outputs: paddle.Tensor,
                   labels: paddle.Tensor) -> tuple[np.ndarray, float]:
        loss_sum = float(self.per_image_loss(outputs, labels).sum())
        return outputs.astype("float32").numpy(), loss_sum


TASK_LOSSES: dict[str, type[TaskLoss]] = {ImageClassification.name: ImageClassificationLoss,
                                          LanguageModeling.name: LanguageModelingLoss,
                                          ObjectDetection.name: ObjectDetectionLoss}


def loss_for(task: Task) -> TaskLoss:
    """The loss of the run's task; a task Paddle has no loss for is an error."""
    if task.name not in TASK_LOSSES:
        raise NotImplementedError(f"parbench's Paddle backends do not implement the task "
                                  f"{task.name!r}; they implement: {', '.join(TASK_LOSSES)}")
    return TASK_LOSSES[task.name]()
