"""The one-device example with momentum, resumable: the checkpoint step of the porting examples.
It trains to --steps, writing the model's and the optimizer's variables with
``tf.train.Checkpoint`` to --dir at the end; started again with a larger --steps, it reads them
back and goes on. The momentum buffers are the state a resume must not lose: the losses after a
resume equal the uninterrupted run's, and the four frameworks' versions print the same ones.

    python examples/checkpoint_tf.py --steps 10 --dir /tmp/ckpt   # steps 0-9, then saved
    python examples/checkpoint_tf.py --steps 20 --dir /tmp/ckpt   # steps 10-19
"""

import argparse
from pathlib import Path

import tensorflow as tf
from data import LR, MOMENTUM, batches, initial_weights, make_data
from single_tf import classifier, make_train_step


# --- checkpoint: every variable of the training state, and the step it stopped after. Keras
# creates an optimizer's variables at its first update: built here first, so that a restore
# has them to fill (unbuilt, assert_consumed raises "Unresolved object in checkpoint
# (root).optimizer._variables.2": the momentum buffers had nowhere to go)
def tracked(model, optimizer):
    optimizer.build(model.trainable_variables)
    step = tf.Variable(0, dtype=tf.int64)
    return tf.train.Checkpoint(model=model, optimizer=optimizer, step=step), step


def main():
    parser = argparse.ArgumentParser(description="resumable training, TensorFlow")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--dir", type=Path, required=True)
    args = parser.parse_args()
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")
    prefix = str(args.dir / "checkpoint")
    features, labels = make_data()
    model = classifier(initial_weights())
    optimizer = tf.keras.optimizers.SGD(learning_rate=LR, momentum=MOMENTUM)
    checkpoint, saved_step = tracked(model, optimizer)
    if Path(prefix + ".index").exists():
        checkpoint.read(prefix).assert_consumed()
    start = int(saved_step.numpy())
    train_step = make_train_step(model, optimizer)
    for step, rows in enumerate(batches(args.steps)):
        if step >= start:
            loss = train_step(features[rows], labels[rows])
            print(f"step {step} loss {float(loss):.7f}")
    saved_step.assign(max(start, args.steps))
    checkpoint.write(prefix)


if __name__ == "__main__":
    main()
