"""The one-device example on DEVICES devices with TensorFlow's MirroredStrategy: the second step
of the porting examples. On the CPU the devices are logical ones of one process. Each replica
trains on its part of every global batch, its loss averaged over the *global* batch, and the
strategy sums the replicas' gradients: every step is the one-device step, and the losses
printed are single_tf.py's.

    python examples/dp_tf.py [--steps 20]
"""

import argparse

import tensorflow as tf
from data import BATCH, DEVICES, LR, batches, initial_weights, make_data, shard
from single_tf import classifier


# --- setup: DEVICES logical CPUs, set before TensorFlow touches a device
def mirrored(devices=DEVICES):
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * devices)
    return tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(devices)])


# --- data shard: each replica its part of the global batch (data.shard, by its replica id)
def distributed_batch(strategy, features, labels, rows):
    def part(context, array):
        return array[shard(rows, context.replica_id_in_sync_group,
                           context.num_replicas_in_sync)]
    return tuple(strategy.experimental_distribute_values_from_function(
        lambda context, array=array: part(context, array)) for array in (features, labels))


# --- step: per row, then averaged over the global batch (not the replica's): summing the
# replicas' gradients then gives the global batch's mean gradient
PER_ROW = tf.keras.losses.SparseCategoricalCrossentropy(
    from_logits=True, reduction=tf.keras.losses.Reduction.NONE)


def make_train_step(strategy, model, optimizer):
    def replica_step(x, y):
        with tf.GradientTape() as tape:
            per_row = PER_ROW(y, model(x, training=True))
            loss = tf.nn.compute_average_loss(per_row, global_batch_size=BATCH)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))  # all-reduces them
        return loss

    @tf.function
    def train_step(x, y):
        per_replica = strategy.run(replica_step, args=(x, y))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
    return train_step


def main():
    parser = argparse.ArgumentParser(description="data-parallel training, TF MirroredStrategy")
    parser.add_argument("--steps", type=int, default=20)
    steps = parser.parse_args().steps
    if steps < 1:
        parser.error(f"--steps must be at least 1, got {steps}")
    train(mirrored(), steps)


def train(strategy, steps):
    features, labels = make_data()
    with strategy.scope():  # variables created here are mirrored on every replica
        model = classifier(initial_weights())
        optimizer = tf.keras.optimizers.SGD(learning_rate=LR)
    train_step = make_train_step(strategy, model, optimizer)
    print(f"devices {strategy.num_replicas_in_sync}")
    for step, rows in enumerate(batches(steps)):
        loss = train_step(*distributed_batch(strategy, features, labels, rows))
        print(f"step {step} loss {float(loss):.7f}")


if __name__ == "__main__":
    main()
