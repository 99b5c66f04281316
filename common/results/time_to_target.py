"""Time to target over seeds: which approach reaches a --target first, and at N devices how
many more samples (or tokens) the target took against how much faster each step went.

A row is a configuration (``accuracy_change.configuration``: everything a run fixes but the
seed, its target included) whose runs had a target (records of schema 12 on). Its figures are
medians over seeds of each seed's median over repeats; a run that did not reach the target
counts as infinitely slow, so a median of runs that mostly missed reads "not reached" and is
never shown as a time. One seed means the same initial weights and data order in every
framework and at every device count, so two rows are compared seed by seed: the ratio is the
geometric mean of the seeds' ratios, its interval Student's t over the seeds both reached the
target with (3 or more), as MLPerf asks for several seeds because time to a target varies
from seed to seed far more than step time does.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable

import numpy as np

from .accuracy_change import Configuration, configuration, find_baseline
from .intervals import REPEATS_FOR_T, Interval, Ratio, t_interval
from .records import task_of_record
from .rows import Cell, is_profiled

NOT_REACHED = "not reached"
AGAINST_ONE_DEVICE = ("vs 1-dev: items", "vs 1-dev: items/s", "vs 1-dev: time")  # N > 1 only
COLUMNS = ("target", "model", "dataset", "backend", "devices", "launcher", "modes",
           "runs reached", "seeds", "time to target s", "vs first", "steps to target",
           "to target", *AGAINST_ONE_DEVICE)
SAID_ONCE = ("target", "model", "dataset")  # with the report's mode columns
NOTE = (
    "The time from the first touch of training data to the end of the evaluation that reached "
    "the target (start-up, model building and weight loading off the clock; the first step's "
    "compilation and every evaluation on it), as MLPerf Training times it; each run stopped "
    "there. Each figure: the median over seeds of each seed's median over repeats; a run that "
    "missed the target counts as infinitely slow, so a median that lands on one reads 'not "
    "reached'. In brackets: the 95% interval, Student's t over the seeds (3 or more, every one "
    "reached). vs first: time / the fastest row's at the same device count, seed by seed (the "
    "same seed is the same initial weights and data order in every row: the geometric mean of "
    "the seeds' ratios, t over them). vs 1-dev, for N devices against the framework's 1-device "
    "baseline (as in Did N devices change the result): items: how many more samples or tokens "
    "the target took (above 1 where a larger global batch learns less per sample); items/s: "
    "how much faster the steps went through them; time: the product, seed by seed.")


def _target_of(record: dict) -> dict | None:
    return (record.get("metrics") or {}).get("target")


def target_text(record: dict) -> str:
    """'accuracy >= 0.9, every 4 steps': what a run aimed at, and how often it looked."""
    target = _target_of(record)
    every = (record.get("config") or {}).get("eval_every")
    sign = ">=" if target["better"] == "higher" else "<="
    return f"{target['metric']} {sign} {target['value']:g}, " + (
        f"every {every} steps" if every else "every epoch")


def _run_time(record: dict) -> float:
    target = _target_of(record) if record["status"] == "ok" else None
    return target["time_s"] if target and target["reached"] else math.inf


def _by_seed(runs: list[dict], value: Callable[[dict], float]) -> dict[int, float]:
    """Each seed's median of ``value`` over its repeats."""
    seeds: dict[int, list[float]] = defaultdict(list)
    for run in runs:
        seeds[run["seed"]].append(value(run))
    return {seed: float(np.median(values)) for seed, values in sorted(seeds.items())}


def _reached(runs: list[dict], key: str) -> float | None:
    """The median over seeds of ``metrics.target[key]`` among the runs that reached it."""
    hit = [r for r in runs if _run_time(r) < math.inf]
    found = _by_seed(hit, lambda r: _target_of(r)[key])
    return float(np.median(list(found.values()))) if found else None


def _throughput(runs: list[dict]) -> float | None:
    ok = [r for r in runs if r["status"] == "ok"]
    found = _by_seed(ok, lambda r: r["metrics"]["throughput"])
    return float(np.median(list(found.values()))) if found else None


def time_interval(times: dict[int, float]) -> Interval | None:
    """Student's t over the seeds' times, where there are 3 or more and every one reached."""
    values = list(times.values())
    if len(values) < REPEATS_FOR_T or not all(math.isfinite(v) for v in values):
        return None
    found = t_interval(values)
    return Interval(found.low, found.high, f"t, {len(values)} seeds")


def seed_ratio(top: dict[int, float], bottom: dict[int, float]) -> Ratio | None:
    """top / bottom seed by seed, over the seeds where both are finite: the geometric mean of
    the ratios, with Student's t over them from 3 seeds on; None without a shared seed."""
    shared = [seed for seed in top if seed in bottom
              and math.isfinite(top[seed]) and math.isfinite(bottom[seed])]
    ratios = [top[seed] / bottom[seed] for seed in shared]
    if not ratios:
        return None
    value = float(np.exp(np.mean(np.log(ratios))))
    if len(ratios) < REPEATS_FOR_T:
        return Ratio(value, None)
    found = t_interval(ratios)
    return Ratio(value, Interval(found.low, found.high, f"paired by seed, t over "
                                                        f"{len(ratios)} seeds"))


def _time_cell(times: dict[int, float]) -> str:
    median = float(np.median(list(times.values())))
    if not math.isfinite(median):
        return NOT_REACHED
    interval = time_interval(times)
    return f"{median:.3g}" + (f" ({interval.text()})" if interval else "")


def _ratio_cell(found: Ratio | None) -> str | None:
    return None if found is None else found.text()


def groups_with_targets(records: list[dict]) -> dict[Configuration, list[dict]]:
    """The runs of each configuration that had a target (profiled runs left out, and resumed
    ones: their clock starts at the resume)."""
    groups: dict[Configuration, list[dict]] = defaultdict(list)
    for record in records:
        if _target_of(record) is not None and not is_profiled(record) and "resumed" not in record:
            groups[configuration(record)].append(record)
    return groups


def _row(config: Configuration, runs: list[dict], fastest: dict[int, float],
         baseline: list[dict] | None) -> dict[str, Cell]:
    times = _by_seed(runs, _run_time)
    reached = sum(_run_time(r) < math.inf for r in runs)
    unit = task_of_record(runs[0]).unit
    items = _reached(runs, "items")
    row: dict[str, Cell] = {
        "target": target_text(runs[0]), "model": runs[0]["model"],
        "dataset": runs[0]["dataset"], "backend": config.backend, "devices": config.devices,
        "launcher": config.launcher, "modes": config.modes.label,
        "runs reached": f"{reached}/{len(runs)}", "seeds": len(times),
        "time to target s": _time_cell(times),
        "vs first": _ratio_cell(seed_ratio(times, fastest)),
        "steps to target": _reached(runs, "steps"),
        "to target": None if items is None else f"{items:.4g} {unit}",
        "vs 1-dev: items": None, "vs 1-dev: items/s": None, "vs 1-dev: time": None}
    if baseline is not None:
        base_items, base_speed = _reached(baseline, "items"), _throughput(baseline)
        speed = _throughput(runs)
        row["vs 1-dev: items"] = None if None in (items, base_items) \
            else f"{items / base_items:.3g}"
        row["vs 1-dev: items/s"] = None if None in (speed, base_speed) \
            else f"{speed / base_speed:.3g}"
        row["vs 1-dev: time"] = _ratio_cell(seed_ratio(times, _by_seed(baseline, _run_time)))
    return row


def _fastest_at(groups: dict[Configuration, list[dict]], devices: int,
                spec: tuple) -> dict[int, float]:
    """The per-seed times of the configuration with the lowest median time among those at
    ``devices`` of one spec (its target included)."""
    peers = [c for c in groups if c.devices == devices and c.spec == spec]
    best = min(peers, key=lambda c: float(np.median(list(_by_seed(groups[c],
                                                                   _run_time).values()))))
    return _by_seed(groups[best], _run_time)


def time_to_target_rows(records: list[dict]) -> list[dict[str, Cell]]:
    """One row per configuration that had a target (COLUMNS), by spec, devices, then time."""
    groups = groups_with_targets(records)

    def order(config: Configuration) -> tuple:
        times = _by_seed(groups[config], _run_time)
        return (str(config.spec), config.nodes, config.devices,
                float(np.median(list(times.values()))), config.backend)

    rows = []
    for config in sorted(groups, key=order):
        found = find_baseline(config, groups) if config.devices > 1 else None
        rows.append(_row(config, groups[config], _fastest_at(groups, config.devices,
                                                              config.spec),
                         groups[found] if found else None))
    return rows


def first_line(rows: list[dict[str, Cell]]) -> str | None:
    """The headline's line: which approach reached each target first at each device count
    (the first row of each), with the next one's ratio; None without such rows."""
    firsts: dict[tuple, list[dict[str, Cell]]] = defaultdict(list)
    for row in rows:
        firsts[(row["model"], row["dataset"], row["target"], row["devices"])].append(row)
    parts = []
    for (model, dataset, target, devices), of in firsts.items():
        where = f"{model} on {dataset}, {target}, {devices} device(s):"
        if of[0]["time to target s"] == NOT_REACHED:
            parts.append(f"{where} not reached")
            continue
        runner_up = f", next {of[1]['backend']} x{of[1]['vs first']}" if len(of) > 1 else ""
        parts.append(f"{where} {of[0]['backend']} first in {of[0]['time to target s']} s"
                     f"{runner_up}")
    return ("Time to target: " + "; ".join(parts) + ".") if parts else None
