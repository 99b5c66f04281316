"""What every TensorFlow strategy shares: threads and devices, the compiled train and eval
steps (each computing the run's task's loss, tasks.py), feeding each replica its shard, the
facts a record needs (versions, devices, memory). The strategies' base class, which puts these
together, is strategy.py's TFStrategy.

Importing this module imports TensorFlow (through tfkeras.py, which sets the environment it
reads at import first); ``tf`` and ``keras`` are re-exported for the tests and benchmarks.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from parbench.base.devices import physical_gpu
from parbench.contract.batches import shard_slice
from parbench.run.job import Job
from parbench.run.modes import Modes, Observed

from .tasks import TaskLoss
from .tfkeras import keras, tf

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


def replica_bytes(strategy: tf.distribute.Strategy, variables: list, device: str) -> int:
    """Bytes of the copies of ``variables`` that live on ``device`` (a mirrored variable has
    one per replica; a Keras variable wraps its TF variable in ``.value``)."""
    copies = (copy for variable in variables
              for copy in strategy.experimental_local_results(getattr(variable, "value", variable)))
    return sum(copy.shape.num_elements() * copy.dtype.size for copy in copies
               if copy.device == device)


PRECISION_POLICIES = {"fp32": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}


def set_precision(precision: str) -> None:
    """--precision as Keras' global dtype policy. Layers take the policy in force when they are
    created, so this runs before the model is built; mixed policies keep float32 variables."""
    keras.mixed_precision.set_global_policy(PRECISION_POLICIES[precision])


class GradientFunction:
    """(x, y) -> (loss, gradients of the trainable variables) of one (micro-)batch on one
    replica, for ``loss_of(x, y)``; the loss is scaled for the gradient when the optimizer
    scales losses (fp16).

    The forward runs stateless (``keras.StatelessScope``): BatchNorm's running-statistic
    updates come back as values and are assigned after the call. That lets ``jit`` compile
    this function with XLA on its own. Under MirroredStrategy (measured on CPU) an XLA function
    can neither update a running statistic (an ``only_first_replica`` variable's update is a
    merge_call, refused inside a nested function) nor hold ``optimizer.apply`` (XLA on the
    whole step fails with "Trying to access resource ... located in device CPU:1 from device
    CPU:0"), so both stay outside, in the plain graph."""

    def __init__(self, model: keras.Model, optimizer: keras.optimizers.Optimizer,
                 loss_of: Callable[[tf.Tensor, tf.Tensor], tf.Tensor], jit: bool):
        self.model, self.optimizer, self.loss_of, self.jit = model, optimizer, loss_of, jit
        self.function = tf.function(self._stateless, jit_compile=True) if jit \
            else self._stateless
        self.xla_calls: set[tuple[str, str]] = set()  # (function, device) of traced XLA calls

    def _stateless(self, x: tf.Tensor, y: tf.Tensor) -> tuple:
        with keras.StatelessScope() as scope, tf.GradientTape() as tape:
            loss = self.loss_of(x, y)
            scaled = self.optimizer.scale_loss(loss)  # the loss itself unless fp16
        gradients = tape.gradient(scaled, self.model.trainable_variables)
        updates = [scope.get_current_value(v) for v in self.model.non_trainable_variables]
        return loss, gradients, updates

    def __call__(self, x: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, list[tf.Tensor]]:
        loss, gradients, updates = self.function(x, y)
        if self.jit:
            self._note_xla_call(loss)
        for variable, value in zip(self.model.non_trainable_variables, updates):
            if value is not None:
                variable.assign(value)
        return loss, gradients

    def _note_xla_call(self, output: tf.Tensor) -> None:
        """Record the call op the traced step really holds, if XLA must compile it: the
        evidence that --compile took effect. XLA compiles once per function and device."""
        op = output.op
        while op.type == "Identity":
            op = op.inputs[0].op
        if op.get_attr("_XlaMustCompile"):
            self.xla_calls.add((op.get_attr("f").name, op.device))

    @property
    def compiled_graphs(self) -> int | None:
        return len(self.xla_calls) if self.jit else None


class TrainStep:
    """The custom loops' step: ``step(x, y, lr)`` -> mean loss over the global batch; x and y
    are per-replica values.

    Each replica splits its rows into ``micro_batches`` contiguous parts, sums their gradients
    and applies them once: the optimizer's cross-replica sum is the step's one reduction. Each
    part's loss is its sum over the *global* batch (``tf.nn.compute_average_loss``), so the
    parts' gradients add up to the replica's, and the replicas' to the global mean's. The
    per-row loss is the task's (tasks.py)."""

    def __init__(self, strategy: tf.distribute.Strategy, model: keras.Model,
                 optimizer: keras.optimizers.Optimizer, global_batch: int, modes: Modes,
                 task: TaskLoss):
        self.strategy, self.model, self.optimizer, self.task = strategy, model, optimizer, task
        self.global_batch, self.micro_batches = global_batch, modes.grad_accum
        self.gradients = GradientFunction(model, optimizer, self.loss, modes.compile)
        self.traced_micro_batches = 0  # backward passes one replica step holds, once traced
        self.function = tf.function(self._step)

    def loss(self, x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        """The loss of these rows as the step differentiates it (the profiler times it too)."""
        # Sum over these rows / global batch: summed over parts and replicas, the global mean.
        per_row = self.task.per_example_loss(y, self.model(x, training=True))
        return tf.nn.compute_average_loss(per_row, global_batch_size=self.global_batch)

    def _replica_step(self, x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        losses, total = [], None
        for x_part, y_part in zip(tf.split(x, self.micro_batches), tf.split(y, self.micro_batches)):
            loss, gradients = self.gradients(x_part, y_part)
            total = gradients if total is None else [a + b for a, b in zip(total, gradients)]
            losses.append(loss)
        self.traced_micro_batches = len(losses)
        self.optimizer.apply(total, self.model.trainable_variables)
        return tf.add_n(losses)

    def _step(self, x, y, lr: tf.Tensor) -> tf.Tensor:
        self.optimizer.learning_rate.assign(lr)  # the schedule is computed in common, fed per step
        return self.strategy.reduce(SUM, self.strategy.run(self._replica_step, args=(x, y)),
                                    axis=None)

    def __call__(self, x, y, lr: tf.Tensor) -> tf.Tensor:
        return self.function(x, y, lr)


def train_step(step: TrainStep, strategy: tf.distribute.Strategy, x, y, lr: float) -> float:
    """One compiled step on this process's rows, each replica fed its shard of them."""
    loss = step(replica_rows(strategy, x), replica_rows(strategy, y),
                tf.constant(lr, tf.float32))  # a tensor: a Python float would retrace per value
    return float(loss)


def replica_rows(strategy: tf.distribute.Strategy, rows):
    """What a step's ``strategy.run`` takes: --input arrays gives this process's rows as numpy,
    split here (``distribute``); --input native gives the distributed iterator's per-replica
    values, already split by the pipeline and placed on their devices."""
    return distribute(strategy, rows, shard_slice) if isinstance(rows, np.ndarray) else rows


def observed(model: keras.Model, gradients: GradientFunction, micro_batches: int,
             optimizer: keras.optimizers.Optimizer) -> Observed:
    """What the traced training step really did (see parbench.run.modes)."""
    synchronized = [bn for bn in model.batchnorms() if bn.reduced_over is not None]
    return Observed(compute_dtype=model.first_output_dtype or "not traced",
                    compiled_graphs=gradients.compiled_graphs,
                    sync_bn_layers=len(synchronized), micro_batches=micro_batches,
                    # the shared rule, inside a LossScaleOptimizer under fp16
                    clipped_steps=getattr(optimizer, "inner_optimizer", optimizer).clipped())


def make_eval_step(strategy: tf.distribute.Strategy, model: keras.Model,
                   task: TaskLoss) -> Callable:
    """step(x, y) -> per-replica (the task's outputs of each row, loss_sum), inference mode
    (image classification: the predicted classes)."""

    def replica_eval(x: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        return task.evaluation(y, model(x, training=False))

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
             y: np.ndarray, split: Splitter) -> tuple[np.ndarray, float]:
    """(the task's outputs of each row, loss_sum) over this process's rows (image
    classification: the predicted classes, int64): its own replicas only, no collective.
    Replica r scored rows ``split(n, R, r)``, contiguous and in replica order, so their outputs
    concatenated in that order are in row order."""
    outputs, loss_sums = eval_step(distribute(strategy, x, split),
                                   distribute(strategy, y, split))
    rows = [np.asarray(p) for p in strategy.experimental_local_results(outputs)]
    loss_sum = sum(float(v) for v in strategy.experimental_local_results(loss_sums))
    return np.concatenate(rows), loss_sum


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
    # a visible GPU keeps its physical name, '/physical_device:GPU:<n>'
    ids = [physical_gpu(int(g.name.rsplit(":", 1)[1])) for g in gpus]
    return {"framework": "tensorflow", "framework_version": tf.__version__,
            "device_names": devices, "gpu_models": models, "gpus": ids,
            "cuda_version": build.get("cuda_version") if gpus else None,
            "nccl_version": build.get("nccl_version") if gpus else None,
            "keras_version": keras.__version__, "notes": notes or [], **extra}

