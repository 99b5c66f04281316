"""--profile for Paddle (single, DataParallel under spawn or launch): runtime.TrainStep's
statements in fp32 with one micro-batch (config refuses --profile with any run mode), with a
synchronised clock between forward+loss, backward and the optimizer step, and paddle.profiler
around the window.

Dygraph runs each statement to completion on the host (``synchronize`` waits for a GPU), so
wall clocks between statements split the step exactly. Gradient communication cannot be
isolated: DataParallel's reducer all-reduces gradient buckets inside ``loss.backward()``, and
Paddle 3.3's profiler records no event for it on gloo (its result tree holds operators, their
kernels and the forward/backward/optimizer ranges, nothing of the collective), so that time is
part of backward. With several processes each profiled step also all-reduces, on its own
clock and after the step, one buffer as large as all gradients: an estimate of what the
reducer sends, not a measurement of it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import paddle
import paddle.distributed as dist
from paddle import profiler

from parbench.run.profiling import TOP_OPS

from .runtime import TrainStep, has_gpu

ONE_DEVICE = "one device: no gradient communication"
ESTIMATE = (
    "an estimate, not part of the step: T(one all-reduce of a float32 buffer as large as all "
    "trainable gradients), timed after the step. The real all-reduce runs inside backward "
    "(DataParallel's reducer, in buckets) and its time is in backward; Paddle's profiler "
    "records no event for it, so it cannot be isolated. Includes waiting for the slower rank")


def _optimizer_phase(train: TrainStep) -> str:
    """What the optimizer phase times: the update rule, and the clipping when there is one."""
    rule = ("AdamW" if isinstance(train.optimizer, paddle.optimizer.AdamW)
            else "Momentum with L2 decay")
    clip = "gradient clipping by global norm, " if train.clip else ""
    return f"{clip}optimizer.step() ({rule}) and clear_grad()"


class StepProfiler:
    """parbench.profiling.StepProfiler for a strategy's TrainStep (its model, DataParallel or
    not, and optimizer)."""

    tool = "paddle.profiler"

    def __init__(self, train: TrainStep, synchronize: Callable[[], None],
                 communicates: bool = False):
        self.train, self.synchronize = train, synchronize
        self.model, self.optimizer = train.model, train.optimizer
        size = sum(int(np.prod(p.shape)) for p in self.model.parameters() if p.trainable)
        self.buffer = paddle.zeros([size], "float32") if communicates else None
        self.includes = {
            "forward": "inputs to tensors, forward pass, cross-entropy loss",
            "backward": "loss.backward()" + (
                ", including DataParallel's gradient all-reduce" if communicates else ""),
            "optimizer": _optimizer_phase(train),
            "communication": ESTIMATE if communicates else ONE_DEVICE,
            "step": "forward + backward + optimizer, one wall-clock span"}
        self.notes = ["paddle.profiler records during these steps: its overhead is in the "
                      "times. Top operations are by host (CPU) self time."]

    def _now(self) -> float:
        self.synchronize()
        return time.perf_counter()

    def step(self, x: np.ndarray, y: np.ndarray,
             lr: float) -> tuple[float, dict[str, float | None]]:
        self.optimizer.set_lr(lr)
        start = self._now()
        self.model.train()
        inputs, labels = paddle.to_tensor(x), paddle.to_tensor(y)
        loss = self.train.task_loss.mean_loss(self.model(inputs), labels)  # the task's loss
        forward = self._now()
        loss.backward()
        self.train.count_first_step(1)  # when the profiled window starts at step 0
        backward = self._now()
        self.train.apply()  # --clip-grad-norm's clipping, optimizer.step(), clear_grad()
        end = self._now()
        return float(loss), {"forward": forward - start, "backward": backward - forward,
                             "optimizer": end - backward, "communication": self._all_reduce(),
                             "step": end - start}

    def _all_reduce(self) -> float | None:
        if self.buffer is None:
            return None
        start = self._now()
        dist.all_reduce(self.buffer)  # zeros: the sum stays zero
        return self._now() - start

    def start(self) -> None:
        targets = [profiler.ProfilerTarget.CPU, *([profiler.ProfilerTarget.GPU] if has_gpu()
                                                  else [])]
        # its default on_trace_ready writes a Chrome trace into ./profiler_log; the result is
        # read in memory instead
        self.profiler = profiler.Profiler(targets=targets, on_trace_ready=lambda _: None)
        self.profiler.start()

    def stop(self) -> list[dict]:
        self.profiler.stop()
        totals: dict[str, list[int]] = {}
        for root in self.profiler.profiler_result.get_data().values():  # one tree per thread
            _operator_self_ns(root, totals)
        top = sorted(totals.items(), key=lambda item: item[1][1], reverse=True)[:TOP_OPS]
        return [{"name": name, "calls": calls, "self_s": self_ns / 1e9}
                for name, (calls, self_ns) in top]


def _operator_self_ns(node, totals: dict[str, list[int]]) -> int:
    """Add the self time of every operator under ``node`` (its time minus the operators it
    contains; its own kernels and shape inference stay in it) to ``totals`` {name: [calls,
    ns]}; return the time of the outermost operators under ``node``."""
    inner = sum(_operator_self_ns(child, totals) for child in node.children_node)
    if node.type != profiler.TracerEventType.Operator:
        return inner
    took = node.end_ns - node.start_ns
    entry = totals.setdefault(node.name, [0, 0])
    entry[0] += 1
    entry[1] += took - inner
    return took
