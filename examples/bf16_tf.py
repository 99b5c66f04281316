"""The one-device example computing in bfloat16 (mixed precision): the precision step of the
porting examples. The weights and the optimizer stay float32; with Keras' mixed_bfloat16 policy
each layer casts its inputs and weights to bfloat16 and computes in it, and the loss, Keras'
own, computes in float32 on the bfloat16 logits (single_tf.py's step, unchanged). bfloat16 keeps
float32's range, so no loss scaling is needed (float16's LossScaleOptimizer is). The losses
printed follow single_tf.py's to bfloat16's rounding; the script prints the logits' dtype first.

    python examples/bf16_tf.py [--steps 20]
"""

import argparse

import tensorflow as tf
from data import LR, batches, initial_weights, make_data
from single_tf import classifier, make_train_step


# --- model: the policy is global and read when a layer is built, so it is set before
def bf16_classifier(weights):
    tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
    return classifier(weights)


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
