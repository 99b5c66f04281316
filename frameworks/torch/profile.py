"""--profile for torch (single, DataParallel, DDP): the plain fp32 step of runtime.Step (config
refuses --profile with any mode) with a synchronised clock between forward+loss, backward and
the optimizer step, torch.profiler around the window, and, under DDP, each gradient bucket's
all-reduce timed by a comm hook.

Eager mode runs each statement to completion on the host (and ``synchronize`` waits for the
devices), so wall clocks between statements split the step exactly. Gradient communication is
different: DDP launches a bucket's all-reduce as soon as its gradients are ready, while
backward still runs, so it is measured on its own clock and reported as part of backward.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity

from parbench.run.profiling import TOP_OPS

from .runtime import Rows, Step, as_tensor

ONE_DEVICE = "one device: no gradient communication"
DATA_PARALLEL = ("not isolated: nn.DataParallel scatters inputs and replicates the module "
                 "inside forward and reduces gradients onto device 0 inside backward")
DDP_COMMUNICATION = (
    "wall time during which at least one gradient bucket's all-reduce was in flight: the union "
    "of [DDP comm hook called, its future completed] over the step's buckets. It overlaps "
    "backward and is counted inside backward's time, not added to it; it includes waiting "
    "for the slower rank to reach the same bucket")
DDP_NOTES = [
    ("Profiled DDP runs all-reduce through a comm hook that calls DDP's default allreduce_hook "
     "(divide by the world size, then all-reduce), the arithmetic of DDP's built-in reduction."),
    ("On NCCL a bucket's future completes when its kernel has run on the CUDA stream; the span "
     "is read on the host when the completion callback runs."),
]


def _union_s(spans: list[tuple[float, float]]) -> float:
    """Seconds covered by at least one of the (start, end) spans."""
    total, covered_to = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > covered_to:
            total += end - max(start, covered_to)
            covered_to = end
    return total


class StepProfiler:
    """parbench.profiling.StepProfiler for a torch model, its optimizer and its devices."""

    tool = "torch.profiler"

    def __init__(self, train: Step, synchronize: Callable[[], None],
                 communication: str = ONE_DEVICE):
        self.train = train  # the strategy's step: its model, optimizer and device
        self.model, self.optimizer, self.device = train.model, train.optimizer, train.device
        self.synchronize = synchronize
        self.spans: list[tuple[float, float]] | None = None  # a list only in profiled steps
        self.ddp = isinstance(self.model, DDP)
        if self.ddp:  # a hook is registered once, before the first step, and stays
            self.model.register_comm_hook(None, self._timed_allreduce)
        self.includes = {
            "forward": "inputs to the device, forward pass, cross-entropy loss",
            "backward": "zero_grad and loss.backward()" + (
                ", including the wait for every bucket's all-reduce" if self.ddp else ""),
            "optimizer": ("clip_grad_norm_, then " if train.clip is not None else "")
            + f"optimizer.step() ({type(self.optimizer).__name__})",
            "communication": DDP_COMMUNICATION if self.ddp else communication,
            "step": "forward + backward + optimizer, one wall-clock span"}
        self.notes = [*(DDP_NOTES if self.ddp else []),
                      "torch.profiler records during these steps: its overhead is in the times."]

    def _timed_allreduce(self, state, bucket):  # no annotations: DDP rejects string ones
        """DDP's default all-reduce of one bucket; in profiled steps, with its span recorded."""
        spans, began = self.spans, time.perf_counter()
        future = allreduce_hook(state, bucket)
        if spans is None:
            return future

        def finished(done: torch.futures.Future) -> torch.Tensor:
            spans.append((began, time.perf_counter()))
            return done.value()

        return future.then(finished)

    def _now(self) -> float:
        self.synchronize()
        return time.perf_counter()

    def step(self, x: Rows, y: Rows,
             lr: float) -> tuple[float, dict[str, float | None]]:
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.spans = []
        start = self._now()
        inputs = as_tensor(x).to(self.device, non_blocking=True)
        labels = as_tensor(y).to(self.device, non_blocking=True)
        self.model.train()
        loss = self.train.task_loss.mean_loss(self.model(inputs), labels)  # the task's loss
        forward = self._now()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()  # under DDP it returns after every bucket's future completed
        backward = self._now()
        self.train.clip_gradients()  # --clip-grad-norm, as the unprofiled step does
        self.optimizer.step()
        end = self._now()
        self.train.record_first(1)  # when the profiled window starts at step 0
        spans, self.spans = self.spans, None
        return loss.item(), {"forward": forward - start, "backward": backward - forward,
                             "optimizer": end - backward,
                             "communication": _union_s(spans) if self.ddp else None,
                             "step": end - start}

    def start(self) -> None:
        cuda = self.device.type == "cuda"
        self.profile = torch.profiler.profile(
            activities=[ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])])
        self.profile.start()

    def stop(self) -> list[dict]:
        """Operators by self time: device time where there is a GPU, else CPU time."""
        self.profile.stop()
        key = "self_device_time_total" if self.device.type == "cuda" else "self_cpu_time_total"
        events = sorted(self.profile.key_averages(), key=lambda e: getattr(e, key),
                        reverse=True)[:TOP_OPS]
        return [{"name": e.key, "calls": e.count, "self_s": getattr(e, key) / 1e6}
                for e in events]
