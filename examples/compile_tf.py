"""The one-device example with the step compiled by XLA (tf.function(jit_compile=True)): the
compilation step of the porting examples. A plain tf.function already runs a graph, executed op
by op by TensorFlow's runtime; jit_compile=True hands the whole step to XLA, which fuses it into
one program. The numbers are the graph's, so the losses printed are single_tf.py's (to float32
rounding); the script then prints whether the step has an XLA program.

    python examples/compile_tf.py [--steps 20]
"""

import argparse

import tensorflow as tf
from data import LR, batches, initial_weights, make_data
from single_tf import classifier, make_train_step


def main():
    parser = argparse.ArgumentParser(description="compilation, TensorFlow")
    parser.add_argument("--steps", type=int, default=20)
    steps = parser.parse_args().steps
    if steps < 1:
        parser.error(f"--steps must be at least 1, got {steps}")
    features, labels = make_data()
    model = classifier(initial_weights())
    # --- step: single_tf.py's, compiled whole by XLA. Under MirroredStrategy compiling the
    # whole step fails (a replica's variables live on another device): compile the
    # per-replica loss and gradient function instead, and apply the gradients outside it
    optimizer = tf.keras.optimizers.SGD(learning_rate=LR)
    train_step = make_train_step(model, optimizer, jit_compile=True)
    for step, rows in enumerate(batches(steps)):
        loss = train_step(features[rows], labels[rows])
        print(f"step {step} loss {float(loss):.7f}")
    program = train_step.experimental_get_compiler_ir(features[rows], labels[rows])()
    print(f"XLA program {program.startswith('HloModule')}")


if __name__ == "__main__":
    main()
