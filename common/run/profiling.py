"""``parbench run --profile``: where the steady-state step's time goes, framework-free.

A profiled run takes the steps of a *window* (the steady steps the record's step time also
counts, at most PROFILE_STEPS, within one epoch) through the strategy's StepProfiler instead
of ``train_step``: the same math, with clocks between forward, backward and optimizer (and,
with several devices, a gradient-communication figure), while the framework's own profiler
runs around the window only. Each rank keeps its figures in its rank file (``Session``); the
harness turns them into the profile document (``document``), returned beside the record and
written by ``parbench run`` next to it as ``<record stem>.profile.json``; the record keeps a
short summary (``summary``) under ``profile`` for the report, and ``variant.profile`` keeps it
apart from plain records.

What each phase includes, and how phases overlap, differs by framework (DDP all-reduces
while backward runs; TensorFlow's step is one compiled graph, split by timing extra graphs):
every profile file says it in ``phases`` and ``notes``, in the framework's own words.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

PROFILE_STEPS = 10  # enough for a median, few enough that profiler overhead stays contained
TOP_OPS = 10  # operations per rank in the profile file
SUMMARY_OPS = 3  # of those, kept in the record for the report
PHASES = ("forward", "backward", "optimizer", "communication")
SUFFIX = ".profile.json"
SHARE_NOTE = ("share_of_step = a phase's median / the median step time (step_ms); phases that "
              "overlap (see phases) do not add up to 1.")


class StepProfiler(Protocol):
    tool: str  # the framework profiler whose operations top_ops lists
    includes: dict[str, str]  # phase -> what its time includes, for the reader
    notes: list[str]  # overlaps, estimates and limits, for the reader

    def start(self) -> None:
        """Start the framework's profiler, just before the window's first step."""

    def step(self, x: np.ndarray, y: np.ndarray,
             lr: float) -> tuple[float, dict[str, float | None]]:
        """train_step's math, timed: (loss, seconds of each of PHASES and of the whole 'step';
        communication None where there is none to measure)."""

    def stop(self) -> list[dict]:
        """Stop the profiler after the window's last step; its TOP_OPS operations by self
        time, most first, each {name, calls, self_s} summed over the window."""


def window(total_steps: int, warmup: int, per_epoch: int) -> list[int]:
    """[first, stop) of the profiled steps: from the first steady step (``warmup`` is the
    record's own warm-up rule) for at most PROFILE_STEPS, and never past the end of that
    epoch, so no evaluation (which follows an epoch's last step) falls inside the framework
    profiler's window. A run too short for steady steps profiles its last step."""
    first = min(warmup, total_steps - 1)
    epoch_end = (first // per_epoch + 1) * per_epoch
    return [first, min(total_steps, first + PROFILE_STEPS, epoch_end)]


class Session:
    """One rank's profiled window, driven by the loop: ``take`` gives a step's function (the
    profiled step inside the window, ``train_step`` outside it) and starts the profiler at the
    window's first step; ``done`` follows the step's clock and stops the profiler after the
    last, so the profiler's summary is never inside a timed step."""

    def __init__(self, profiler: StepProfiler, steps: list[int], train_step: Callable):
        self.profiler, self.steps, self.train_step = profiler, range(*steps), train_step
        self.phases_s: dict[str, list[float | None]] = {}
        self.top_ops: list[dict] = []

    def take(self, index: int) -> Callable:
        if index not in self.steps:
            return self.train_step
        if index == self.steps.start:
            self.profiler.start()
        return self._step

    def _step(self, x: np.ndarray, y: np.ndarray, lr: float) -> float:
        loss, phases = self.profiler.step(x, y, lr)
        for name, seconds in phases.items():
            self.phases_s.setdefault(name, []).append(seconds)
        return loss

    def done(self, index: int) -> None:
        if index == self.steps[-1]:
            self.top_ops = self.profiler.stop()

    def result(self) -> dict:
        """What the rank file keeps (RankLog.profile)."""
        return {"tool": self.profiler.tool, "steps": [self.steps.start, self.steps.stop],
                "phases_s": self.phases_s, "top_ops": self.top_ops,
                "includes": self.profiler.includes, "notes": self.profiler.notes}


def _ms(values: list[float | None] | None) -> list[float] | None:
    return None if not values or None in values else [v * 1000 for v in values]


def _rank(rank: int, data: dict) -> dict:
    per_step = {name: _ms(data["phases_s"].get(name)) for name in (*PHASES, "step")}
    median = {name: None if ms is None else float(np.median(ms)) for name, ms in per_step.items()}
    steps = len(per_step["step"])
    return {"rank": rank, "median_ms": median,
            "share_of_step": {name: None if median[name] is None else
                              median[name] / median["step"] for name in PHASES},
            "per_step_ms": per_step,
            "top_ops": [{"name": op["name"], "calls": op["calls"], "self_ms": op["self_s"] * 1e3,
                         "self_ms_per_step": op["self_s"] * 1e3 / steps}
                        for op in data["top_ops"]]}


def document(record: dict, record_file: str, ranks: list[tuple[int, dict]]) -> dict:
    """The profile file: every rank's medians, shares, per-step figures and top operations,
    what each phase includes, and which rank was slowest (highest median step)."""
    first = ranks[0][1]
    per_rank = [_rank(rank, data) for rank, data in ranks]
    slowest = max(per_rank, key=lambda r: r["median_ms"]["step"])
    return {"record": record_file, "run_id": record["run_id"], "backend": record["backend"],
            "launcher": record["launcher"], "world_size": record["world_size"],
            "tool": first["tool"],
            "steps": {"first": first["steps"][0], "count": first["steps"][1] - first["steps"][0]},
            "phases": first["includes"], "notes": [*first["notes"], SHARE_NOTE],
            "slowest_rank": slowest["rank"], "ranks": per_rank}


def summary(doc: dict) -> dict:
    """The record's ``profile``: the slowest rank's medians and top operations, which the
    record keeps so the report needs no other file, and the profile file's name (the record
    file's, ``doc["record"]``, with SUFFIX)."""
    slowest = next(r for r in doc["ranks"] if r["rank"] == doc["slowest_rank"])
    return {
        "file": doc["record"].removesuffix(".json") + SUFFIX, "tool": doc["tool"],
        "steps": doc["steps"], "slowest_rank": slowest["rank"],
        "median_ms": slowest["median_ms"], "share_of_step": slowest["share_of_step"],
        "top_ops": [{"name": op["name"], "self_ms_per_step": op["self_ms_per_step"]}
                    for op in slowest["top_ops"][:SUMMARY_OPS]]}
