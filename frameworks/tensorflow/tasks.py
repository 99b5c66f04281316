"""Each task's computations in TensorFlow, written once (parbench.contract.tasks says what each
task is): the per-example loss that the custom loops' train step, the eval step and the profiler
reduce, the same loss as a Keras loss for fit, and what an evaluation returns. ``loss_for`` picks
them by the run's task (``job.task``); a task TensorFlow does not implement is an error before
anything is built.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

from parbench.contract import detection
from parbench.contract.tasks import ImageClassification, LanguageModeling, ObjectDetection, Task

from .tfkeras import keras, tf


class TaskLoss(ABC):
    """A task's loss and evaluation outputs, from the labels and the model's outputs."""

    name: str  # parbench.contract.tasks' name of the task

    @abstractmethod
    def per_example_loss(self, labels: tf.Tensor, outputs: tf.Tensor) -> tf.Tensor:
        """One loss per row (a language model's: the mean over its positions); the callers
        reduce it (the train step over the global batch)."""

    @abstractmethod
    def evaluation(self, labels: tf.Tensor, outputs: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """(what the task scores of each row, the loss summed over every row -- and, for a
        language model, every position): what a strategy's ``evaluate`` returns for them (see
        parbench.run.loop.Strategy)."""

    @abstractmethod
    def keras_loss(self) -> keras.losses.Loss:
        """``per_example_loss`` as a Keras loss, for fit (see KerasLoss)."""


# (labels, outputs) -> the loss of every element Keras averages (a row's, or a token's)
ElementLoss = Callable[[tf.Tensor, tf.Tensor], tf.Tensor]


class KerasLoss(keras.losses.Loss):
    """A task's loss per element, reduced as Keras' built-in losses are ("sum_over_batch_size":
    the mean over every element of the replica's loss tensor, divided by the replicas in sync
    under a tf.distribute strategy), so fit computes what it computes with Keras' own loss.
    Keras hands ``call`` the labels converted to the loss's float dtype: ``labels_dtype``
    casts them back."""

    def __init__(self, task: TaskLoss, elements: ElementLoss, labels_dtype: tf.DType):
        super().__init__(name=f"{task.name}_loss", reduction="sum_over_batch_size")
        self.elements, self.labels_dtype = elements, labels_dtype

    def call(self, y_true: tf.Tensor, y_pred: tf.Tensor) -> tf.Tensor:
        return self.elements(tf.cast(y_true, self.labels_dtype), y_pred)


class TFImageClassification(TaskLoss):
    """Softmax cross-entropy of the logits against the class index; an evaluation scores the
    predicted class (the arg max). The models return float32 logits under every precision
    policy, so the loss is computed in float32."""

    name = ImageClassification.name

    def per_example_loss(self, labels: tf.Tensor, outputs: tf.Tensor) -> tf.Tensor:
        return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=outputs)

    def evaluation(self, labels: tf.Tensor, outputs: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        predicted = tf.argmax(outputs, axis=1, output_type=tf.int64)
        return predicted, tf.reduce_sum(self.per_example_loss(labels, outputs))

    def keras_loss(self) -> KerasLoss:
        # The class indices come back exact (float32 holds integers below 2**24), cast as
        # Keras' own sparse cross-entropy casts them: fit computes Keras'
        # SparseCategoricalCrossentropy(from_logits=True) to the bit.
        return KerasLoss(self, self.per_example_loss, labels_dtype=tf.int64)


class TFLanguageModeling(TaskLoss):
    """Softmax cross-entropy of every position's logits [rows, T, vocab] against its next token
    [rows, T]; the training loss is the mean over rows and positions. Every row has the same T
    positions, so a row's loss is the mean over its positions: the custom loops' sum of row
    losses over the global batch is the mean over every token of it. An evaluation scores the
    predicted next token at every position (the arg max over the vocabulary)."""

    name = LanguageModeling.name

    def per_token_loss(self, labels: tf.Tensor, outputs: tf.Tensor) -> tf.Tensor:
        """[rows, T]: the sparse cross-entropy takes any leading dimensions, no flattening."""
        return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=outputs)

    def per_example_loss(self, labels: tf.Tensor, outputs: tf.Tensor) -> tf.Tensor:
        return tf.reduce_mean(self.per_token_loss(labels, outputs), axis=1)

    def evaluation(self, labels: tf.Tensor, outputs: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        predicted = tf.argmax(outputs, axis=-1, output_type=tf.int64)  # [rows, T]
        return predicted, tf.reduce_sum(self.per_token_loss(labels, outputs))

    def keras_loss(self) -> KerasLoss:
        # Per token, as Keras' SparseCategoricalCrossentropy(from_logits=True) returns it for
        # [rows, T, vocab] logits: "sum_over_batch_size" divides the sum by the element count,
        # rows x T, so fit's loss is the mean over rows and positions, the custom loops' one
        # (token ids below 2**24 come back exact from float32)
        return KerasLoss(self, self.per_token_loss, labels_dtype=tf.int64)


class TFObjectDetection(TaskLoss):
    """CenterNet's penalty-reduced focal loss on the heat map plus the weighted L1 of size and
    offset at the face centres, per image over its centres (ObjectDetection.loss); the
    training loss is the mean over images, so the custom loops' sum of image losses over the
    global batch is it. Outputs and labels are both in the contract's NCHW layout (the model
    transposes its maps back), so the channels are read where torch reads them. An
    evaluation returns the raw maps, which the task decodes and scores on the host."""

    name = ObjectDetection.name

    def per_example_loss(self, labels: tf.Tensor, outputs: tf.Tensor) -> tf.Tensor:
        outputs = tf.cast(outputs, tf.float32)  # the loss in float32 under every precision
        logit = outputs[:, 0]
        heat, centre = labels[:, detection.HEAT], labels[:, detection.MASK]
        p = tf.sigmoid(logit)
        # log p and log(1 - p) as log-sigmoids of the logit: finite for any logit, no clamp
        at_centre = -(1 - p) ** detection.FOCAL_ALPHA * tf.math.log_sigmoid(logit) * centre
        elsewhere = (-(1 - heat) ** detection.FOCAL_BETA * p ** detection.FOCAL_ALPHA
                     * tf.math.log_sigmoid(-logit) * (1 - centre))
        size = tf.abs(outputs[:, 1:3] - labels[:, detection.SIZE_W:detection.SIZE_H + 1])
        offset = tf.abs(outputs[:, 3:5] - labels[:, detection.OFFSET_X:detection.OFFSET_Y + 1])
        regression = tf.reduce_sum(detection.SIZE_WEIGHT * size + offset, axis=1) * centre
        total = tf.reduce_sum(at_centre + elsewhere + regression, axis=[1, 2])
        return total / tf.maximum(tf.reduce_sum(centre, axis=[1, 2]), 1.0)

    def evaluation(self, labels: tf.Tensor, outputs: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        return tf.cast(outputs, tf.float32), tf.reduce_sum(self.per_example_loss(labels, outputs))

    def keras_loss(self) -> KerasLoss:
        # One loss per image: "sum_over_batch_size" divides the sum by the rows, so fit's loss
        # is the mean over images, the custom loops' one; the labels are float32 maps already
        return KerasLoss(self, self.per_example_loss, labels_dtype=tf.float32)


IMAGE_CLASSIFICATION, LANGUAGE_MODELING = TFImageClassification(), TFLanguageModeling()
OBJECT_DETECTION = TFObjectDetection()
TASK_LOSSES: dict[str, TaskLoss] = {task.name: task for task in (
    IMAGE_CLASSIFICATION, LANGUAGE_MODELING, OBJECT_DETECTION)}


def loss_for(task: Task) -> TaskLoss:
    """TensorFlow's computations for ``task``; NotImplementedError for one it lacks."""
    if task.name not in TASK_LOSSES:
        raise NotImplementedError(f"TensorFlow does not implement the task {task.name!r} "
                                  f"(it implements {', '.join(sorted(TASK_LOSSES))})")
    return TASK_LOSSES[task.name]
