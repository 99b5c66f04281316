"""The data-parallel example with a BatchNorm whose batch statistics are taken over the global
batch, across the replicas (synchronized BatchNorm): the synchronized-BatchNorm step of the
porting examples. A BatchNorm in training mode normalises with its batch's mean and variance;
on N replicas each sees 1/N of the batch, so a plain BatchNorm normalises each part with that
part's statistics, and the step is no longer the one-device step. Synchronized, the
statistics are the whole batch's, and ``--devices 2`` prints ``--devices 1``'s losses;
``--unsynchronized`` shows what a plain BatchNorm gives instead.

    python examples/syncbn_tf.py [--steps 20] [--devices 2] [--unsynchronized]
"""

import argparse

import tensorflow as tf
from data import (
    BN_EPSILON,
    CLASSES,
    DEVICES,
    FEATURES,
    HIDDEN,
    LR,
    batches,
    initial_weights,
    make_data,
)
from dp_tf import distributed_batch, make_train_step, mirrored


# --- model: synchronized=True all-reduces the statistics across the strategy's replicas;
# Keras' default epsilon is 1e-3, torch's 1e-5: pass it
def normalized_classifier(weights, synchronized=True):
    hidden, head = tf.keras.layers.Dense(HIDDEN), tf.keras.layers.Dense(CLASSES)
    model = tf.keras.Sequential([
        tf.keras.Input((FEATURES,)), hidden,
        tf.keras.layers.BatchNormalization(epsilon=BN_EPSILON, synchronized=synchronized),
        tf.keras.layers.ReLU(), head])
    for layer, name in ((hidden, "hidden"), (head, "head")):
        layer.set_weights([weights[f"{name}.weight"].T, weights[f"{name}.bias"]])
    return model


def main():
    parser = argparse.ArgumentParser(description="synchronized BatchNorm, TF MirroredStrategy")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--devices", type=int, default=DEVICES, choices=(1, 2))
    parser.add_argument("--unsynchronized", action="store_true",
                        help="each replica's BatchNorm on its own rows' statistics")
    args = parser.parse_args()
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")
    strategy = mirrored(args.devices)
    features, labels = make_data()
    with strategy.scope():
        model = normalized_classifier(initial_weights(), not args.unsynchronized)
        optimizer = tf.keras.optimizers.SGD(learning_rate=LR)
    train_step = make_train_step(strategy, model, optimizer)  # dp_tf.py's
    print(f"devices {strategy.num_replicas_in_sync}")
    for step, rows in enumerate(batches(args.steps)):
        loss = train_step(*distributed_batch(strategy, features, labels, rows))
        print(f"step {step} loss {float(loss):.7f}")


if __name__ == "__main__":
    main()
