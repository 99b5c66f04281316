"""The one-device example with the hidden block's activations recomputed in the backward pass
instead of kept (activation checkpointing): the recomputation step of the porting examples. It
trades compute for memory and changes no number, so the losses printed are single_tf.py's; the
script also prints the matrix products in the step's graph, with and without the recomputation:
7 against 5, the block's forward again in the backward and the gradient for the block's input
(the data), which recompute_grad computes though nothing needs it.

    python examples/recompute_tf.py [--steps 20]
"""

import argparse

import tensorflow as tf
from data import LR, batches, initial_weights, make_data
from single_tf import LOSS, classifier
from single_tf import make_train_step as make_plain_step


# --- step: tf.recompute_grad wraps the block, a function of the layer's input alone; the
# layer's variables, read inside it, get their gradients through the recomputation
def make_train_step(model, optimizer):
    hidden, head = model.layers
    hidden_block = tf.recompute_grad(hidden)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = LOSS(y, head(hidden_block(x)))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    return train_step


def matmuls(step, x, y):
    graph = step.get_concrete_function(x, y).graph
    return sum(op.type == "MatMul" for op in graph.get_operations())


def main():
    parser = argparse.ArgumentParser(description="activation checkpointing, TensorFlow")
    parser.add_argument("--steps", type=int, default=20)
    steps = parser.parse_args().steps
    if steps < 1:
        parser.error(f"--steps must be at least 1, got {steps}")
    features, labels = make_data()
    model = classifier(initial_weights())
    train_step = make_train_step(model, tf.keras.optimizers.SGD(learning_rate=LR))
    for step, rows in enumerate(batches(steps)):
        loss = train_step(features[rows], labels[rows])
        print(f"step {step} loss {float(loss):.7f}")
    plain = make_plain_step(model, tf.keras.optimizers.SGD(learning_rate=LR))
    x, y = tf.constant(features[rows]), tf.constant(labels[rows])
    print(f"matmuls per step {matmuls(train_step, x, y)} plain {matmuls(plain, x, y)}")


if __name__ == "__main__":
    main()
