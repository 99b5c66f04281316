"""What every TensorFlow strategy shares: threads and devices, the compiled train and eval
steps, feeding each replica its shard, and the facts a record needs (versions, devices, memory).

Importing this module imports TensorFlow, so the environment it reads at import is set first.
"""

from __future__ import annotations

import os
from collections.abc import Callable

# TensorFlow's C++ logging reads its level once, at import: set it before. A user who wants
# the logs sets TF_CPP_MIN_LOG_LEVEL=0 themselves (see setup_threads for job.verbose).
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ["KERAS_BACKEND"] = "tensorflow"  # the model is written with TF ops

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from parbench.batches import shard_slice  # noqa: E402
from parbench.job import Job  # noqa: E402
from parbench.optim import OptimizerSpec  # noqa: E402

SUM = tf.distribute.ReduceOp.SUM
Splitter = Callable[[int, int, int], slice]  # (rows, parts, part) -> rows of that part


def setup_threads(job: Job) -> dict:
    """Fix TF's thread pools (they change both speed and the bits of the result); must run
    before the first TF op. Returns what was set, for the record."""
    tf.config.threading.set_intra_op_parallelism_threads(job.threads)
    # Independent ops (a replica each, the residual shortcut) may run side by side, each on
    # the intra-op pool: one inter-op thread per compute thread keeps the total explicit.
    tf.config.threading.set_inter_op_parallelism_threads(job.threads)
    tf.get_logger().setLevel("INFO" if job.verbose else "ERROR")
    return {"intra_op_threads": job.threads, "inter_op_threads": job.threads}


def configure_devices(first: int, count: int) -> list[str]:
    """Make ``count`` devices visible, starting at physical GPU ``first``: GPUs when there are
    any (memory growth on, else TF reserves all memory up front), else ``count`` logical CPU
    devices. Must run before the first TF op. Returns the names to hand to a strategy."""
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        if first + count > len(gpus):
            raise RuntimeError(f"asked for GPUs {first}..{first + count - 1}, "
                               f"TensorFlow sees {len(gpus)}")
        chosen = gpus[first:first + count]
        tf.config.set_visible_devices(chosen, "GPU")
        for gpu in chosen:
            tf.config.experimental.set_memory_growth(gpu, True)
        return [f"/gpu:{i}" for i in range(count)]
    if count > 1:
        # Without logical devices, MirroredStrategy("/cpu:0", "/cpu:1") silently puts every
        # replica on CPU:0 (see checked_replica_devices).
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * count)
    return [f"/cpu:{i}" for i in range(count)]


def checked_replica_devices(strategy: tf.distribute.Strategy, model: keras.Model) -> list[str]:
    """Where this process's replicas really hold their weights; an error when two share one."""
    variable = model.trainable_variables[0].value
    devices = [v.device for v in strategy.experimental_local_results(variable)]
    if len(set(devices)) != len(devices) or len(devices) != len(strategy.extended.worker_devices):
        raise RuntimeError(f"{len(strategy.extended.worker_devices)} replicas but their weights "
                           f"live on {devices}: replicas share a device")
    return devices


class SharedSGD(keras.optimizers.Optimizer):
    """parbench.optim's rule (torch SGD): ``buf = m * buf + (g + wd * p); p -= lr * buf``.
    Keras' SGD keeps ``v = m * v - lr * g`` instead, which differs once lr changes, and its
    weight decay is decoupled. Under a strategy, Keras' optimizer base sums the replicas'
    gradients and applies this update on every replica's copy."""

    def __init__(self, momentum: float, weight_decay: float, learning_rate=0.0):
        super().__init__(learning_rate=learning_rate, name="shared_sgd")
        self.momentum, self.coupled_weight_decay = momentum, weight_decay

    def build(self, variables: list) -> None:
        if self.built:
            return
        super().build(variables)
        self.buffers = self.add_optimizer_variables(variables, "momentum_buffer")

    def update_step(self, gradient: tf.Tensor, variable, learning_rate) -> None:
        buf = self.buffers[self._get_variable_index(variable)]
        lr = tf.cast(learning_rate, variable.dtype)
        gradient = gradient + self.coupled_weight_decay * variable
        self.assign(buf, self.momentum * buf + gradient)
        self.assign_sub(variable, lr * buf)


def sgd(model: keras.Model, spec: OptimizerSpec, learning_rate=None) -> SharedSGD:
    """The shared rule, its buffers created now: call inside the strategy's scope, so they are
    mirrored like the weights (a first build inside a compiled step would be in replica
    context, where variables cannot be created). ``learning_rate``: a schedule for fit; the
    custom loops assign each step's rate instead."""
    optimizer = SharedSGD(spec.momentum, spec.weight_decay,
                          spec.lr if learning_rate is None else learning_rate)
    optimizer.build(model.trainable_variables)
    return optimizer


def per_example_loss(labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)


def make_train_step(strategy: tf.distribute.Strategy, model: keras.Model,
                    optimizer: SharedSGD, global_batch: int) -> Callable:
    """step(x, y, lr) -> mean loss over the global batch; x and y are per-replica values."""

    def replica_step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            # Sum over this shard / global batch: summed over replicas, the global mean.
            loss = tf.nn.compute_average_loss(per_example_loss(y, logits),
                                              global_batch_size=global_batch)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply(gradients, model.trainable_variables)
        return loss

    @tf.function
    def step(x, y, lr: tf.Tensor) -> tf.Tensor:
        optimizer.learning_rate.assign(lr)  # the schedule is computed in common, fed per step
        return strategy.reduce(SUM, strategy.run(replica_step, args=(x, y)), axis=None)

    return step


def train_step(step: Callable, strategy: tf.distribute.Strategy, x: np.ndarray, y: np.ndarray,
               lr: float) -> float:
    """One compiled step on this process's rows, each replica fed its shard of them."""
    loss = step(distribute(strategy, x, shard_slice), distribute(strategy, y, shard_slice),
                tf.constant(lr, tf.float32))  # a tensor: a Python float would retrace per value
    return float(loss)


def make_eval_step(strategy: tf.distribute.Strategy, model: keras.Model) -> Callable:
    """step(x, y) -> per-replica [correct, loss_sum], inference mode."""

    def replica_eval(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        logits = model(x, training=False)
        correct = tf.reduce_sum(tf.cast(tf.argmax(logits, axis=1) == y, tf.float32))
        return tf.stack([correct, tf.reduce_sum(per_example_loss(y, logits))])

    # Eval chunks differ in size (the last one, uneven splits): one trace per shape, no more.
    return tf.function(lambda x, y: strategy.run(replica_eval, args=(x, y)),
                       reduce_retracing=True)


def distribute(strategy: tf.distribute.Strategy, array: np.ndarray, split: Splitter):
    """This process's rows split over its replicas: local replica r gets ``split(n, R, r)``,
    placed on its device, so no TF-chosen split decides which rows a replica sees."""
    devices = strategy.extended.worker_devices
    local = len(devices)

    def shard(context: tf.distribute.experimental.ValueContext) -> tf.Tensor:
        replica = context.replica_id_in_sync_group % local  # global id -> this process's
        with tf.device(devices[replica]):
            return tf.constant(array[split(len(array), local, replica)])

    return strategy.experimental_distribute_values_from_function(shard)


def evaluate(strategy: tf.distribute.Strategy, eval_step: Callable, x: np.ndarray,
             y: np.ndarray, split: Splitter) -> tuple[int, float]:
    """(correct, loss_sum) over this process's rows: its own replicas only, no collective."""
    per_replica = eval_step(distribute(strategy, x, split), distribute(strategy, y, split))
    totals = sum(np.asarray(v, np.float64) for v in
                 strategy.experimental_local_results(per_replica))
    return int(totals[0]), float(totals[1])


def all_reduce_sum(strategy: tf.distribute.Strategy, values: np.ndarray) -> np.ndarray:
    """Sum over processes: each process's total enters once, through its first replica."""
    local = len(strategy.extended.worker_devices)

    def contribution(context: tf.distribute.experimental.ValueContext) -> tf.Tensor:
        first = context.replica_id_in_sync_group % local == 0
        return tf.constant(values if first else np.zeros_like(values), tf.float64)

    per_replica = strategy.experimental_distribute_values_from_function(contribution)
    return strategy.reduce(SUM, per_replica, axis=None).numpy()


def _gpu_names(devices: list[str]) -> list[str]:
    return [d.split("device:", 1)[-1] for d in devices if "GPU" in d.upper()]


def synchronize(devices: list[str]) -> None:
    if _gpu_names(devices):
        tf.test.experimental.sync_devices()


def reset_peak_memory(devices: list[str]) -> None:
    for name in _gpu_names(devices):
        tf.config.experimental.reset_memory_stats(name)


def peak_device_mb(devices: list[str]) -> list[float] | None:
    """Allocator peaks per GPU; None on CPU, where TensorFlow has no such counter."""
    names = _gpu_names(devices)
    if not names:
        return None
    return [tf.config.experimental.get_memory_info(n)["peak"] / 2**20 for n in names]


def describe(devices: list[str], notes: list[str] | None = None, **extra) -> dict:
    gpus = tf.config.get_visible_devices("GPU")  # the ones this process drives
    build = tf.sysconfig.get_build_info()
    models = [tf.config.experimental.get_device_details(g).get("device_name") for g in gpus]
    return {"framework": "tensorflow", "framework_version": tf.__version__,
            "device_names": devices, "gpu_models": models,
            "cuda_version": build.get("cuda_version") if gpus else None,
            "nccl_version": build.get("nccl_version") if gpus else None,
            "keras_version": keras.__version__, "notes": notes or [], **extra}
