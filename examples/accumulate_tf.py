"""The one-device example with each batch of 32 in 2 micro-batches of 16, their gradients
accumulated before one optimizer step: the gradient-accumulation step of the porting examples.
Keras keeps no gradient between calls, so the step sums the micro-batches' gradients itself;
each micro-batch's mean loss is divided by the micro-batch count, so the sum is the whole
batch's mean gradient, and the losses printed are single_tf.py's.

    python examples/accumulate_tf.py [--steps 20]
"""

import argparse

import tensorflow as tf
from data import LR, MICRO_BATCHES, batches, initial_weights, make_data, micro_batches
from single_tf import LOSS, classifier


# --- step: one traced graph over the micro-batches (a Python loop, unrolled when traced)
def make_train_step(model, optimizer):
    @tf.function
    def train_step(xs, ys):
        variables = model.trainable_variables
        summed = [tf.zeros_like(v) for v in variables]
        total = 0.0
        for x, y in zip(xs, ys):
            with tf.GradientTape() as tape:
                loss = LOSS(y, model(x, training=True)) / MICRO_BATCHES
            summed = [s + g for s, g in zip(summed, tape.gradient(loss, variables))]
            total += loss
        optimizer.apply_gradients(zip(summed, variables))
        return total
    return train_step


def main():
    parser = argparse.ArgumentParser(description="gradient accumulation, TensorFlow")
    parser.add_argument("--steps", type=int, default=20)
    steps = parser.parse_args().steps
    if steps < 1:
        parser.error(f"--steps must be at least 1, got {steps}")
    features, labels = make_data()
    model = classifier(initial_weights())
    train_step = make_train_step(model, tf.keras.optimizers.SGD(learning_rate=LR))
    for step, rows in enumerate(batches(steps)):
        parts = micro_batches(rows)
        loss = train_step([features[p] for p in parts], [labels[p] for p in parts])
        print(f"step {step} loss {float(loss):.7f}")


if __name__ == "__main__":
    main()
