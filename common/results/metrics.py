"""A run's metrics from its ranks' logs: the record's ``metrics`` (step times of the slowest
rank, throughput, the evaluations, what the modes did, memory, per node)."""

from __future__ import annotations

import math

import numpy as np

from parbench.contract.tasks import Target, Task
from parbench.run.loop import RankLog

# what each evaluation of the curve keeps, besides its task's own figures
CURVE_FIELDS = ("step", "accuracy", "loss", "train_s", "eval_s", "wall_s")


def _percentiles(step_s: np.ndarray) -> dict:
    p10, median, p90 = np.percentile(step_s * 1000, [10, 50, 90])
    return {"median": float(median), "p10": float(p10), "p90": float(p90)}


def warmup_steps(total: int) -> int:
    """Steps left out of steady-state timing: the first (tracing/compile) and a few more."""
    return min(max(1, total // 10), 5) if total > 1 else 0


def aggregate(logs: list[RankLog], task: Task, global_batch: int, launch_time: float,
              target: tuple[Target, float] | None) -> dict:
    """Metrics of a run from its per-process logs; the slowest process defines each step, and
    throughput counts the task's unit (samples of a global batch). ``target``: --target's
    figure and value."""
    step_s = np.max([log.step_s for log in logs], axis=0)
    first_steady = warmup_steps(len(step_s))
    rows = np.array([log.rows for log in logs], dtype=float)
    losses = np.array([log.losses for log in logs]).T @ rows / rows.sum()
    steady = step_s[first_steady:]
    evals = logs[0].evals
    timing = _percentiles(steady)
    devices = [mb for log in logs for mb in (log.peak_device_mb or [])]
    to_target = time_to_target(logs, task.items(global_batch), target)
    observed = logs[0].observed or {}
    graphs = [log.observed.get("compiled_graphs") for log in logs if log.observed]
    return {
        "throughput": task.items(global_batch) / (timing["median"] / 1000),
        "items_per_step": task.items(global_batch),
        "step_time_ms": timing,
        "steady_steps": int(len(steady)),
        # each steady step's time: what a confidence interval bootstraps when repeats are few
        "steady_step_ms": [float(ms) for ms in steady * 1000],
        "cpu_ms_per_step": cpu_per_step(logs, first_steady),
        "startup_s": max(log.first_step_start for log in logs) - launch_time,
        "first_step_s": float(step_s[0]),
        "train_s": float(step_s.sum()),
        "eval_s": float(evals[-1]["eval_s"]),
        "final_accuracy": float(evals[-1]["accuracy"]),
        "final_loss": float(evals[-1]["loss"]),
        "loss_curve": [float(v) for v in losses],
        "accuracy_curve": [{k: e[k] for k in CURVE_FIELDS + task.curve_fields if k in e}
                           for e in evals],
        **{k: evals[-1][k] for k in task.final_fields},
        **task.extra_metrics(evals[-1]),
        "compute_dtype": observed.get("compute_dtype"),
        "compiled_graphs": None if None in graphs else max(graphs, default=None),
        "sync_bn_layers": observed.get("sync_bn_layers", 0),
        "micro_batches": observed.get("micro_batches", 1),
        "clipped_steps": observed.get("clipped_steps"),
        "target": to_target,
        "time_to_target_s": to_target["time_s"] if to_target else None,
        "peak_rss_mb": [log.peak_rss_mb for log in logs],
        "peak_device_mb": devices or None,
        # every device's state, in rank order (None where the framework does not count it);
        # one step's collectives are alike on every rank, so rank 0's
        "state_bytes": None if None in (held := [log.state_bytes for log in logs])
        else [device for devices_held in held for device in devices_held],
        "communication": logs[0].communication,
        "nodes": per_node(logs, first_steady),
    }


def time_to_target(logs: list[RankLog], items_per_step: int,
                   target: tuple[Target, float] | None) -> dict | None:
    """metrics.target: the figure and value aimed at, and whether, when, after how many steps
    and items (samples or tokens) the first evaluation reached it. ``time_s`` is that
    evaluation's end on the clock of time to target (parbench.run.loop.Evaluations), on the
    last rank to get there. None without a target."""
    if target is None:
        return None
    figure, value = target
    evals = logs[0].evals
    hit = next((i for i, e in enumerate(evals) if figure.reached(e[figure.metric], value)), None)
    aimed = {"metric": figure.metric, "value": value, "better": figure.better,
             "evaluations": len(evals)}
    if hit is None:
        return {**aimed, "reached": False, "time_s": None, "steps": None, "items": None}
    steps = evals[hit]["step"]
    return {**aimed, "reached": True, "time_s": max(log.evals[hit]["wall_s"] for log in logs),
            "steps": steps, "items": steps * items_per_step}


def cpu_per_step(logs: list[RankLog], first_steady: int) -> dict:
    """Each rank's mean user and system CPU milliseconds per steady step (every thread of its
    process): beside the wall step time, it shows a collective that busy-waits (CPU without
    progress) or a worker starved of its cores (less CPU than its threads could use)."""
    def mean_ms(log: RankLog, which: int) -> float:
        steady = [spent[which] for spent in log.cpu_s[first_steady:]]
        return 1000 * float(np.mean(steady)) if steady else 0.0

    return {"user": [mean_ms(log, 0) for log in logs],
            "system": [mean_ms(log, 1) for log in logs]}


def per_node(logs: list[RankLog], first_steady: int) -> list[dict]:
    """Per node: its steady step time (per step, the slowest of its ranks) and two figures no
    collective evens out. In lockstep data parallelism every rank waits for the slowest in the
    gradient all-reduce, so step times come out alike on every node; a slow node shows in the
    time its ranks take to score their part of the test set (the final evaluation, before its
    counts are summed) and in how long they wait for their batches."""
    return [_node_entry([log for log in logs if log.node == node], first_steady)
            for node in sorted({log.node for log in logs})]


def _node_entry(logs: list[RankLog], first_steady: int) -> dict:
    step_s = np.max([log.step_s for log in logs], axis=0)[first_steady:]
    scores = [log.evals[-1].get("score_s") for log in logs]
    waits = [w for log in logs for w in (log.input or {}).get("wait_s", [])]
    return {"node": logs[0].node, "host": logs[0].host, "ranks": [log.rank for log in logs],
            "step_time_ms": _percentiles(step_s),
            "score_s": None if None in scores else max(scores),
            "data_wait_ms": float(np.mean(waits)) * 1000 if waits else None}


def divergence(logs: list[RankLog]) -> dict | None:
    """Where a run stopped because a loss was not finite: the step (every rank stopped there),
    the first rank whose loss it was and that loss (as text: JSON has no NaN); None when the
    run trained to its end."""
    stopped = [log for log in logs if log.diverged_step is not None]
    if not stopped:
        return None
    first = next(log for log in stopped if not math.isfinite(log.losses[-1]))
    return {"step": first.diverged_step, "rank": first.rank, "loss": repr(first.losses[-1])}
