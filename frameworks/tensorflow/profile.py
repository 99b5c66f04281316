"""--profile for TensorFlow's custom loops (tf-single, tf-mirrored, tf-multiworker).

The step is one compiled graph: no host clock can be read between its forward, backward and
optimizer parts. So each profiled step first runs, on the same shards, extra compiled
functions timed one by one: forward+loss; forward+loss+gradients; with several replicas, an
all-reduce of gradient-shaped tensors through the strategy's own cross-device ops. Then it runs
the real step, timed. The phases are differences of those times (see INCLUDES): estimates,
since the real step's graph may schedule its parts differently. The extra functions change
nothing (BatchNorm's running-statistic updates are discarded with ``keras.StatelessScope``;
no optimizer runs), and their operations, under the name scope SCOPE, are left out of the
top operations, so those describe the real step only.

Top operations come from TensorFlow's own profiler: ``tf.profiler.experimental`` writes an
XSpace around the window, and its profiler plugin's ``framework_op_stats`` tool (the table
TensorBoard shows) turns it into per-operation self times.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from tensorflow.python.profiler.internal import _pywrap_profiler_plugin

from parbench.base.files import private_tempdir
from parbench.contract.batches import shard_slice
from parbench.run.profiling import TOP_OPS

from .runtime import SUM, TrainStep, distribute, synchronize
from .tfkeras import keras, tf

SCOPE = "parbench_profile"  # name scope of the timing functions' operations
INCLUDES = {
    "forward": "T(forward + loss), a compiled function of its own on the same shards",
    "backward": "T(forward + loss + gradients) - T(forward + loss), clamped at 0: an "
                "estimate by subtraction",
    "optimizer": "T(real step) - T(forward + loss + gradients) - T(communication), clamped at "
                 "0: an estimate by subtraction; also holds the step's call overhead, the "
                 "learning-rate assignment, the loss reduction and, with --clip-grad-norm, "
                 "the global norm and the scaling",
    "step": "T(real step): the compiled train step, as the loop runs it",
}
ALL_REDUCE = ("T(all-reduce of tensors shaped like the gradients) through the strategy's "
              "cross-device ops, a compiled function of its own: an estimate of the reduction "
              "the real step does inside optimizer.apply; with several workers it includes "
              "waiting for the slower one")
NOTES = [
    "Each profiled step runs the timing functions, then the real step, on the same batch; only "
    "the real step changes the model.",
    "Top operations leave out the timing functions' (name scope parbench_profile): they "
    "describe the real step. Device rows are used where there is a GPU, else host rows.",
    "tf.profiler records during these steps: its overhead is in the times.",
]


def _scoped(strategy: tf.distribute.Strategy, replica_fn) -> tf.types.experimental.Function:
    """``replica_fn`` on every replica, compiled, its operations under SCOPE."""
    @tf.function
    def run(*args):
        with tf.name_scope(SCOPE):
            return strategy.run(replica_fn, args=args)
    return run


def _timing_functions(strategy: tf.distribute.Strategy, model: keras.Model,
                      loss_of: Callable[[tf.Tensor, tf.Tensor], tf.Tensor]) -> tuple:
    """(forward+loss, forward+loss+gradients, all-reduce or None with one replica), where
    ``loss_of`` is the real step's loss (TrainStep.loss)."""
    def forward(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        with keras.StatelessScope():  # discards BatchNorm's running-statistic updates
            return loss_of(x, y)

    def gradients(x: tf.Tensor, y: tf.Tensor) -> list[tf.Tensor]:
        with keras.StatelessScope(), tf.GradientTape() as tape:
            loss = loss_of(x, y)
        return tape.gradient(loss, model.trainable_variables)

    def all_reduce() -> list[tf.Tensor]:
        # variable values, not zeros: a constant input could be folded away by the compiler
        values = [tf.identity(v) for v in model.trainable_variables]
        return tf.distribute.get_replica_context().all_reduce(SUM, values)

    many = strategy.num_replicas_in_sync > 1
    return (_scoped(strategy, forward), _scoped(strategy, gradients),
            _scoped(strategy, all_reduce) if many else None)


class StepProfiler:
    """parbench.profiling.StepProfiler for a TensorFlow strategy and its compiled train step."""

    tool = "tf.profiler (framework_op_stats)"

    def __init__(self, strategy: tf.distribute.Strategy, model: keras.Model, step: TrainStep,
                 devices: list[str]):
        self.strategy, self.train_step, self.devices = strategy, step, devices
        self.forward, self.gradients, self.all_reduce = _timing_functions(strategy, model,
                                                                          step.loss)
        self.traced = False
        self.includes = {**INCLUDES, "communication": ALL_REDUCE if self.all_reduce else
                         "one replica: no gradient communication"}
        self.notes = NOTES

    def _timed(self, function, *args) -> float:
        start = time.perf_counter()
        function(*args)
        synchronize(self.devices)
        return time.perf_counter() - start

    def step(self, x: np.ndarray, y: np.ndarray,
             lr: float) -> tuple[float, dict[str, float | None]]:
        xs, ys = (distribute(self.strategy, rows, shard_slice) for rows in (x, y))
        timing = [(self.forward, (xs, ys)), (self.gradients, (xs, ys))] + (
            [(self.all_reduce, ())] if self.all_reduce else [])
        if not self.traced:  # the first call traces and compiles: keep that out of the times
            for function, args in timing:
                function(*args)
            self.traced = True
        forward, gradients, *rest = [self._timed(function, *args) for function, args in timing]
        communication = rest[0] if rest else None
        start = time.perf_counter()
        loss = float(self.train_step(xs, ys, tf.constant(lr, tf.float32)))
        step = time.perf_counter() - start
        return loss, {"forward": forward, "backward": max(0.0, gradients - forward),
                      "optimizer": max(0.0, step - gradients - (communication or 0.0)),
                      "communication": communication, "step": step}

    def start(self) -> None:
        self.scratch = private_tempdir("parbench-run-")  # removed by a later parbench if we die
        tf.profiler.experimental.start(self.scratch.name)

    def stop(self) -> list[dict]:
        tf.profiler.experimental.stop()
        try:
            spaces = [str(p) for p in Path(self.scratch.name).rglob("*.xplane.pb")]
            data, ok = _pywrap_profiler_plugin.xspace_to_tools_data(
                spaces, "framework_op_stats", {})
        finally:
            self.scratch.cleanup()
        if not ok:
            raise RuntimeError(f"TensorFlow's profiler could not read its trace: {data!r}")
        return _top_ops(json.loads(data))


def _top_ops(tables: list[dict] | dict) -> list[dict]:
    """The real step's operations by total self time, from framework_op_stats' first table
    (the second repeats it without the IDLE row); rows of one operation name (MirroredStrategy
    lists replicas apart) are summed."""
    table = tables[0] if isinstance(tables, list) else tables
    columns = [c["id"] for c in table["cols"]]
    rows = [dict(zip(columns, (cell["v"] for cell in row["c"]))) for row in table["rows"]]
    on_device = any(r["host_or_device"] == "Device" for r in rows)
    totals: dict[str, tuple[int, float]] = {}
    for r in rows:
        if r["type"] == "IDLE" or SCOPE in r["operation"].split("/") \
                or (r["host_or_device"] == "Device") != on_device:
            continue
        name = f"{r['operation']} ({r['type']})"
        calls, self_us = totals.get(name, (0, 0.0))
        totals[name] = (calls + int(r["occurrences"]), self_us + r["total_self_time"])
    top = sorted(totals.items(), key=lambda item: item[1][1], reverse=True)[:TOP_OPS]
    return [{"name": name, "calls": calls, "self_s": self_us / 1e6}
            for name, (calls, self_us) in top]
