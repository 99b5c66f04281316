"""Train a small classifier on one device with TensorFlow: the first step of the porting examples.

It imports TensorFlow and examples/data.py (numpy only), nothing of parbench: the data, the
initial weights and the batch order come from there, as in the PyTorch, Paddle and JAX versions
beside this file, so all four print the same losses (to float32 rounding).

    python examples/single_tf.py [--steps 20]
"""

import argparse

import tensorflow as tf
from data import CLASSES, FEATURES, HIDDEN, LR, batches, initial_weights, make_data


# --- model: Keras keeps a dense kernel as [in, out], the transpose of torch's weight
def classifier(weights):
    model = tf.keras.Sequential([tf.keras.Input((FEATURES,)),
                                 tf.keras.layers.Dense(HIDDEN, activation="relu"),
                                 tf.keras.layers.Dense(CLASSES)])
    for layer, name in zip(model.layers, ("hidden", "head")):
        layer.set_weights([weights[f"{name}.weight"].T, weights[f"{name}.bias"]])
    return model


# --- step: a traced graph (handed whole to XLA with jit_compile=True); the loss is the batch
# mean, as torch's cross_entropy, computed in float32 whatever the logits' dtype
LOSS = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def make_train_step(model, optimizer, jit_compile=False):
    @tf.function(jit_compile=jit_compile)
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = LOSS(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    return train_step


def main():
    parser = argparse.ArgumentParser(description="one-device training, TensorFlow")
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


if __name__ == "__main__":
    main()
