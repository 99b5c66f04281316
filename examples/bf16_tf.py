"""The one-device example computing in bfloat16 (mixed precision): the precision step of the
porting examples. The weights and the optimizer stay float32; with Keras' mixed_bfloat16 policy
each layer casts its inputs and weights to bfloat16 and computes in it, and the loss is taken in
float32. bfloat16 keeps float32's range, so no loss scaling is needed (float16's
LossScaleOptimizer is). The losses printed follow single_tf.py's to bfloat16's rounding; the
script prints the logits' dtype first.

    python examples/bf16_tf.py [--steps 20]
"""

import argparse

import tensorflow as tf
from data import LR, batches, initial_weights, make_data
from single_tf import LOSS, classifier


# --- model: the policy is global and read when a layer is built, so it is set before
def bf16_classifier(weights):
    tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
    return classifier(weights)


# --- step: single_tf.py's, the logits cast to float32 for the loss
def make_train_step(model, optimizer):
    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = LOSS(y, tf.cast(model(x, training=True), tf.float32))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    return train_step


def main():
    parser = argparse.ArgumentParser(description="bfloat16 mixed precision, TensorFlow")
    parser.add_argument("--steps", type=int, default=20)
    steps = parser.parse_args().steps
    if steps < 1:
        parser.error(f"--steps must be at least 1, got {steps}")
    features, labels = make_data()
    model = bf16_classifier(initial_weights())
    print(f"logits {model(features[:1]).dtype.name}")
    train_step = make_train_step(model, tf.keras.optimizers.SGD(learning_rate=LR))
    for step, rows in enumerate(batches(steps)):
        loss = train_step(features[rows], labels[rows])
        print(f"step {step} loss {float(loss):.7f}")


if __name__ == "__main__":
    main()
