"""Checkpoints in TensorFlow's own API (the folder's layout and the loop's side:
parbench.run.checkpoint): a ``tf.train.Checkpoint`` of the model's variables and the optimizer,
written by a ``tf.train.CheckpointManager``.

The model's variables go in by their canonical names (those of --save-weights), not as
``model=model``: Keras 3 (3.15) keeps a layer's list of sublayers in its own ``TrackedList``,
which TensorFlow's object graph does not follow, so ``tf.train.Checkpoint(model=model)``
reaches the ResNet's residual blocks only through the optimizer's list of trainable
variables, and the blocks' BatchNorm running statistics (16 tensors of the digits ResNet, 16
of the detector's) are neither saved nor missed: ``restore(...).assert_consumed()`` passes
(measured). The canonical names reach every variable of every model kind.

The optimizer is a TF trackable whose variable list the object graph does follow: its step
count, the shared rule's slot variables (SGD's momentum buffers, AdamW's m and v), its count
of clipped steps, and under fp16 the LossScaleOptimizer's dynamic scale and step counter.
make_optimizer builds the slots in the strategy's scope before the first step, so a resume
restores them at once instead of deferring them to a first ``apply``. The learning rate is in
it too, though the step assigns each step's own. No step draws a random number (no dropout;
the order of the rows is the contract's), so there is no random state to keep.

A mirrored variable is saved once, its copies being equal, and restored into every copy, so
a checkpoint loads on any number of devices or workers. Under MultiWorkerMirroredStrategy
every worker saves, since reading a variable through the strategy may take a collective; only
the chief writes into the folder, the others into a temporary folder of their own that they
then delete (TensorFlow's documented pattern). One kind of variable is not equal across
workers: BatchNorm's running statistics (``only_first_replica``) are broadcast from each
worker's first replica to its own devices only, so each worker keeps, and scores the test set
with, its own. A worker other than the chief writes its own beside the chief's checkpoint
(``worker<N>/``) and a resume restores them over the chief's (measured: with the chief's
alone, a resumed 2-worker ResNet's last test loss differed by 1.2e-4). A checkpoint of fewer
workers gives the others the chief's.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from .tfkeras import keras, tf


def _checkpoint(model: keras.Model, optimizer: keras.optimizers.Optimizer) -> tf.train.Checkpoint:
    return tf.train.Checkpoint(model=model.canonical_variables(), optimizer=optimizer)


def _own_statistics(model: keras.Model) -> dict:
    """This worker's BatchNorm running statistics: the model's only variables that differ
    between workers (none without BatchNorm)."""
    return {name: variable for name, variable in model.canonical_variables().items()
            if not variable.trainable}


def _own_prefix(folder: Path, rank: int) -> str:
    return str(folder / f"worker{rank}" / "statistics")


def save(folder: Path, model: keras.Model, optimizer: keras.optimizers.Optimizer,
         rank: int) -> None:
    """The training state into ``folder``: every process calls it at the same step; the
    chief's (rank 0's) copy stays, and every other worker's running statistics."""
    checkpoint = _checkpoint(model, optimizer)
    if rank == 0:
        tf.train.CheckpointManager(checkpoint, str(folder), max_to_keep=1).save()
        return
    with tempfile.TemporaryDirectory(prefix="parbench-tf-worker-") as scratch:
        tf.train.CheckpointManager(checkpoint, scratch, max_to_keep=1).save()
    statistics = _own_statistics(model)
    if statistics:
        tf.train.Checkpoint(statistics=statistics).write(_own_prefix(folder, rank))


def load(folder: Path, model: keras.Model, optimizer: keras.optimizers.Optimizer,
         rank: int) -> None:
    """Restore what ``save`` wrote, on however many devices and workers; an error when the
    checkpoint and this model do not match one to one (a tensor left over or left out)."""
    path = tf.train.latest_checkpoint(str(folder))
    if path is None:
        raise FileNotFoundError(f"{folder}: no TensorFlow checkpoint in it")
    _checkpoint(model, optimizer).restore(path).assert_consumed()
    own = _own_prefix(folder, rank)
    if tf.io.gfile.exists(f"{own}.index"):  # a worker of the run that wrote it, not the chief
        tf.train.Checkpoint(statistics=_own_statistics(model)).read(own).assert_consumed()
