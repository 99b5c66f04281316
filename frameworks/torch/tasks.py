"""The task's loss and evaluation outputs in torch, written once per task (see
parbench.contract.tasks): the training step, the profiler's step and evaluation all take them
from here, so they compute the same loss."""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch
import torch.nn.functional as F

from parbench.contract import detection
from parbench.contract.tasks import ImageClassification, LanguageModeling, ObjectDetection, Task


class TaskLoss(Protocol):
    def mean_loss(self, outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The training loss of a batch: the mean over its rows (a 0-d tensor, for backward)."""

    def evaluation(self, outputs: torch.Tensor,
                   labels: torch.Tensor) -> tuple[np.ndarray, float]:
        """(the per-row outputs the task scores, on the host; the loss summed over the rows)."""


class ImageClassificationLoss:
    """Softmax cross-entropy of the logits against the class; evaluation scores the predicted
    class of each row (ImageClassification.loss)."""

    def mean_loss(self, outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(outputs, labels)

    def evaluation(self, outputs: torch.Tensor,
                   labels: torch.Tensor) -> tuple[np.ndarray, float]:
        loss_sum = F.cross_entropy(outputs, labels, reduction="sum").item()
        return outputs.argmax(1).cpu().numpy(), loss_sum


class LanguageModelingLoss:
    """Softmax cross-entropy at every position against its next token, the mean over rows and
    positions; evaluation scores the predicted next token at every position
    (LanguageModeling.loss). cross_entropy wants the classes in dimension 1, so the positions
    are flattened into rows: [rows * T, vocab] against [rows * T]."""

    def mean_loss(self, outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(outputs.flatten(0, 1), labels.flatten())

    def evaluation(self, outputs: torch.Tensor,
                   labels: torch.Tensor) -> tuple[np.ndarray, float]:
        loss_sum = F.cross_entropy(outputs.flatten(0, 1), labels.flatten(),
                                   reduction="sum").item()
        return outputs.argmax(-1).cpu().numpy(), loss_sum


class ObjectDetectionLoss:
    """CenterNet's penalty-reduced focal loss on the heat map plus the weighted L1 of size and
    offset at the face centres, per image over its centres, the mean over images
    (ObjectDetection.loss); evaluation returns the raw maps, which the task decodes and
    scores."""

    def per_image_loss(self, outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        outputs = outputs.float()  # the loss in float32 under every precision
        logit, heat, centre = outputs[:, 0], labels[:, detection.HEAT], labels[:, detection.MASK]
        p = torch.sigmoid(logit)
        at_centre = -(1 - p) ** detection.FOCAL_ALPHA * F.logsigmoid(logit) * centre
        elsewhere = (-(1 - heat) ** detection.FOCAL_BETA * p ** detection.FOCAL_ALPHA
                     * F.logsigmoid(-logit) * (1 - centre))
        size = (outputs[:, 1:3] - labels[:, detection.SIZE_W:detection.SIZE_H + 1]).abs()
        offset = (outputs[:, 3:5] - labels[:, detection.OFFSET_X:detection.OFFSET_Y + 1]).abs()
        regression = (detection.SIZE_WEIGHT * size + offset).sum(1) * centre
        total = (at_centre + elsewhere + regression).sum((1, 2))
        return total / centre.sum((1, 2)).clamp(min=1)

    def mean_loss(self, outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return self.per_image_loss(outputs, labels).mean()

    def evaluation(self, outputs: torch.Tensor,
                   labels: torch.Tensor) -> tuple[np.ndarray, float]:
        loss_sum = self.per_image_loss(outputs, labels).sum().item()
        return outputs.float().cpu().numpy(), loss_sum


TASK_LOSSES: dict[str, type[TaskLoss]] = {ImageClassification.name: ImageClassificationLoss,
                                          LanguageModeling.name: LanguageModelingLoss,
                                          ObjectDetection.name: ObjectDetectionLoss}


def loss_for(task: Task) -> TaskLoss:
    """The loss of the run's task; a task torch has no loss for is an error."""
    if task.name not in TASK_LOSSES:
        raise NotImplementedError(f"parbench's torch backends do not implement the task "
                                  f"{task.name!r}; they implement: {', '.join(TASK_LOSSES)}")
    return TASK_LOSSES[task.name]()
