"""The one-device example with dropout on the hidden layer: the random-numbers step of the
porting examples. The masks come from numpy (data.dropout_masks: one per row of each global
batch, from the seed and the step), not from TensorFlow's generator, so every framework drops
the same units and prints the same losses. TensorFlow's own generator, seeded alike, draws
other numbers than the other frameworks' (the script prints its first draws).

    python examples/dropout_tf.py [--steps 20]
"""

import argparse

import tensorflow as tf
from data import LR, batches, dropout_masks, initial_weights, make_data
from single_tf import LOSS, classifier


# --- model: the hidden layer's output times the step's mask (what keras.layers.Dropout draws)
def forward(model, x, mask):
    hidden, head = model.layers
    return head(hidden(x) * mask)


# --- step
def make_train_step(model, optimizer):
    @tf.function
    def train_step(x, y, mask):
        with tf.GradientTape() as tape:
            loss = LOSS(y, forward(model, x, mask))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    return train_step


def main():
    parser = argparse.ArgumentParser(description="dropout from host masks, TensorFlow")
    parser.add_argument("--steps", type=int, default=20)
    steps = parser.parse_args().steps
    if steps < 1:
        parser.error(f"--steps must be at least 1, got {steps}")
    tf.random.set_seed(0)
    print("own draws", " ".join(f"{v:.7f}" for v in tf.random.uniform([3]).numpy().tolist()))
    features, labels = make_data()
    model = classifier(initial_weights())
    train_step = make_train_step(model, tf.keras.optimizers.SGD(learning_rate=LR))
    for step, rows in enumerate(batches(steps)):
        loss = train_step(features[rows], labels[rows], dropout_masks(step))
        print(f"step {step} loss {float(loss):.7f}")


if __name__ == "__main__":
    main()
