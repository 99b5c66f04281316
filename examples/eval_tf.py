"""Evaluation across DEVICES replicas with TensorFlow's MirroredStrategy: the evaluation step of
the porting examples. Each replica scores its contiguous part of a test set of 101 rows (50 and
51: a replica's values may differ in size), and the strategy sums the counts (right answers,
summed loss, rows): the scores are computed from the sums, so they are one device's. Each
version prints the same scores; here of the initial weights, as the data-parallel scripts start.

    python examples/eval_tf.py
"""

import tensorflow as tf
from data import initial_weights, test_data, test_part
from dp_tf import mirrored
from single_tf import classifier

PER_ROW = tf.keras.losses.SparseCategoricalCrossentropy(
    from_logits=True, reduction=tf.keras.losses.Reduction.NONE)


# --- eval: sums, not means, cross the replicas (a mean of the parts' means would weigh the
# 50 rows' part as much as the 51's)
def evaluate(model, x, y):
    logits = model(x, training=False)
    right = tf.reduce_sum(tf.cast(tf.argmax(logits, 1) == y, tf.float64))
    loss = tf.reduce_sum(tf.cast(PER_ROW(y, logits), tf.float64))
    return tf.stack([right, loss, tf.cast(tf.size(y), tf.float64)])


def main():
    strategy = mirrored()
    features, labels = test_data()
    with strategy.scope():
        model = classifier(initial_weights())

    def part(context, array):
        return array[test_part(context.replica_id_in_sync_group, context.num_replicas_in_sync)]
    x, y = (strategy.experimental_distribute_values_from_function(
        lambda context, array=array: part(context, array)) for array in (features, labels))
    counts = strategy.reduce(tf.distribute.ReduceOp.SUM,
                             strategy.run(evaluate, args=(model, x, y)), axis=None)
    right, loss, rows = counts.numpy().tolist()
    print(f"accuracy {right / rows:.7f} loss {loss / rows:.7f} rows {rows:.0f}")


if __name__ == "__main__":
    main()
