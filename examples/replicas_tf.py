"""Random numbers on each of DEVICES replicas with TensorFlow's MirroredStrategy (logical CPUs
of one process): the per-replica step of the porting examples. A dropout mask must differ from
one replica to the next, since each replica drops units of other rows. The script draws each
replica's mask for its rows of a batch twice, from one stateless seed on every replica and from
a tf.random.Generator created in the strategy's scope, and prints whether the replicas' masks
are equal.

    python examples/replicas_tf.py
"""

import argparse

import tensorflow as tf
from data import BATCH, DEVICES, DROPOUT, HIDDEN
from dp_tf import mirrored

SEED = 0
SHAPE = (BATCH // DEVICES, HIDDEN)


# --- random numbers: a Generator made in the strategy's scope gives each replica a stream of
# its own; a stateless op's seed is the whole state, so one seed draws one mask everywhere
def stateless_mask():
    return tf.cast(tf.random.stateless_uniform(SHAPE, seed=[SEED, 0]) >= DROPOUT, tf.float32)


def generator_mask(generator):
    return tf.cast(generator.uniform(SHAPE) >= DROPOUT, tf.float32)


def masks_equal(strategy, draw):
    masks = strategy.experimental_local_results(strategy.run(draw))
    return all(bool(tf.reduce_all(masks[0] == other)) for other in masks[1:])


def main():
    argparse.ArgumentParser(description="random numbers per replica, TF Mirrored").parse_args()
    strategy = mirrored()
    with strategy.scope():
        generator = tf.random.Generator.from_seed(SEED)
    alike = masks_equal(strategy, tf.function(stateless_mask))
    own = masks_equal(strategy, tf.function(lambda: generator_mask(generator)))
    print(f"devices {strategy.num_replicas_in_sync}\none seed: masks equal {alike}\n"
          f"generator in scope: masks equal {own}")


if __name__ == "__main__":
    main()
