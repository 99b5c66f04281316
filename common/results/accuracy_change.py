"""Did N devices change the result: for every N-device configuration, its quality against its
1-device baseline, next to the baseline's seed-to-seed spread, and the causes its record shows.

A configuration is everything a run fixes except the seed (the seed is part of spec_sha256,
so the runs of one configuration have a spec each): backend, devices, launcher, nodes, modes,
and what ``baseline_key`` holds. change_rows' table is one row per configuration and metric.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from parbench.contract.tasks import task_of_model
from parbench.run.modes import Modes, modes_of
from parbench.run.registry import BACKENDS, FRAMEWORKS

from .causes import known_causes
from .records import task_of_record
from .rows import is_profiled, nodes_of

Cell = str | int | float | None

MIN_SEEDS = 3
SPREAD = "max-min"  # of the per-seed medians
CHANGE_COLUMNS = ("backend", "devices", "launcher", "modes", "model", "dataset", "batch",
                  "lr", "budget", "runs ok", "seeds", "metric", "median", "baseline",
                  "baseline seeds", "baseline median", "change", f"baseline spread ({SPREAD})",
                  "verdict", "causes")
# the configuration's columns that a report's table usually holds one value of
CHANGE_SAID_ONCE = ("modes", "model", "dataset", "batch", "lr", "budget")
CHANGE_NOTE = (
    "Each N-device configuration (everything a run fixes but the seed) against its 1-device "
    "baseline: the framework's single backend with the same model, data, 1-device batch, "
    "budget, optimizer and lr and the same modes (sync BN aside), else the same backend at 1 "
    "device. median: the median over seeds of each seed's median over its ok repeats; change: "
    "median - baseline median (for val loss, above 0 is worse). baseline spread: max - min "
    "of the baseline's per-seed medians, over 3 or more seeds. verdict: beyond seed noise when "
    "|change| exceeds that spread, and n/a when either side has fewer than 3 seeds; with 3 "
    "seeds on each side a configuration that changes nothing is still called beyond about 1 "
    "time in 6 (simulated, normal seed noise), with 5 seeds 1 in 36. causes: what the "
    "N-device record shows (parbench.results.causes); 'parbench explain BACKEND --devices N' "
    "switches each off in turn and measures its share.")


@dataclass(frozen=True)
class SeedSummary:
    """One metric of one configuration over its seeds."""

    seeds: int  # distinct seeds with an ok run
    median: float | None  # median over seeds of each seed's median over repeats
    spread: float | None  # max - min of those per-seed medians; None under MIN_SEEDS seeds


def summarise(records: list[dict], key: str) -> SeedSummary:
    """``metrics[key]`` of the ok records, by seed."""
    by_seed: dict[int, list[float]] = defaultdict(list)
    for r in records:
        value = (r.get("metrics") or {}).get(key) if r["status"] == "ok" else None
        if value is not None:
            by_seed[r["seed"]].append(value)
    medians = [float(np.median(values)) for values in by_seed.values()]
    if not medians:
        return SeedSummary(0, None, None)
    spread = float(np.ptp(medians)) if len(medians) >= MIN_SEEDS else None
    return SeedSummary(len(medians), float(np.median(medians)), spread)


def verdict(change: float | None, baseline: SeedSummary, seeds: int) -> str:
    """Whether ``change`` (of a configuration with ``seeds`` seeds) is beyond the baseline's
    seed-to-seed spread."""
    if change is None:
        return "n/a (no figure on one side)"
    fewest = min(seeds, baseline.seeds)
    if fewest < MIN_SEEDS:
        return f"n/a ({fewest} seed{'s' if fewest != 1 else ''}; {MIN_SEEDS} needed)"
    return "beyond seed noise" if abs(change) > baseline.spread else "within seed noise"


def _one_device_lr(record: dict) -> float:
    """The lr the same options give on one device: linear scaling of a per-device batch scales
    with the devices; of a fixed global batch it does not."""
    scaled = record["lr_scaling"] == "linear" and record["batch_mode"] == "per-device"
    lr = record["lr"] * record["per_device_batch"] / record["global_batch"] if scaled \
        else record["lr"]
    return float(f"{lr:.12g}")  # a key: the products above round differently by an ulp


def baseline_key(record: dict) -> tuple:
    """What a run fixes besides seed, backend, devices, launcher, nodes and modes, as one device
    would run it: model and sizes, data, the 1-device batch, budget, optimizer and lr, target
    and evaluation interval. On one
    device --global-batch B and --per-device-batch B are the same run, so both key alike."""
    config = record.get("config") or {}
    batch = record["per_device_batch"] if record["batch_mode"] == "per-device" \
        else record["global_batch"]
    optimizer = tuple(sorted((k, v) for k, v in record["optimizer"].items() if k != "lr"))
    return (record["model"], *(config.get(k) for k in ("width", "depth", "heads")),
            record["dataset"], *(config.get(k) for k in ("data_dir", "context", "vocab",
                                                         "train_subset")),
            batch, config.get("epochs"), config.get("steps"), optimizer, _one_device_lr(record),
            # a run stopped at a target, or evaluated more often, is another configuration
            *(config.get(k) for k in ("target", "target_metric", "eval_every")))


@dataclass(frozen=True)
class Configuration:
    """The runs of one configuration, whatever their seeds: one row (per metric) of the table."""

    backend: str
    devices: int
    launcher: str
    nodes: int
    modes: Modes
    batch_mode: str
    global_batch: int
    lr: float  # the lr it ran: one baseline (spec) holds runs with and without lr scaling
    spec: tuple  # baseline_key


def configuration(record: dict) -> Configuration:
    """The configuration a record's run belongs to."""
    return Configuration(record["backend"], record["world_size"], record["launcher"],
                         nodes_of(record), modes_of(record), record["batch_mode"],
                         record["global_batch"], record["lr"], baseline_key(record))


def find_baseline(config: Configuration,
                  groups: dict[Configuration, list[dict]]) -> Configuration | None:
    """The 1-device configuration ``config`` is judged against (see CHANGE_NOTE)."""
    framework = BACKENDS[config.backend].framework if config.backend in BACKENDS else None
    single = FRAMEWORKS[framework].single if framework else None
    candidates = [c for c in groups if c.devices == 1 and c.nodes == 1 and c.spec == config.spec
                  and c.modes.same_on_one_device(config.modes)]
    for backend in (single, config.backend):
        found = sorted((c for c in candidates if c.backend == backend),
                       key=lambda c: (c.launcher != config.launcher, c.modes.label))
        if found:
            return found[0]
    return None


def _order(config: Configuration) -> tuple:
    known = list(BACKENDS)
    return (known.index(config.backend) if config.backend in known else len(known),
            config.backend, config.nodes, config.devices, config.launcher, config.modes.label,
            str(config.spec), config.batch_mode, config.global_batch, config.lr)


def _config_cells(config: Configuration, runs: list[dict]) -> dict[str, Cell]:
    first, ok = runs[0], [r for r in runs if r["status"] == "ok"]
    budget = first.get("config") or {}
    devices = config.devices if config.nodes == 1 \
        else f"{config.nodes}x{config.devices // config.nodes}"
    batch = f"global {config.global_batch}" if config.batch_mode == "global" else \
        f"per-device {first['per_device_batch']} (global {config.global_batch})"
    causes = known_causes(ok[0]) if ok else []
    scaled = " (linear scaling)" if first["lr_scaling"] == "linear" else ""
    return {"backend": config.backend, "devices": devices, "launcher": config.launcher,
            "modes": config.modes.label, "model": first["model"], "dataset": first["dataset"],
            "batch": batch, "lr": f"{first['lr']:.4g}{scaled}",
            # as the user set it (a task's recipe fills in epochs); else the version's default,
            # which the record does not hold (its steps are those run: a target stops early)
            "budget": f"{budget['epochs']} epochs" if budget.get("epochs")
            else f"{budget['steps']} steps" if budget.get("steps") else "default",
            "runs ok": f"{len(ok)}/{len(runs)}",
            "causes": ", ".join(c.name for c in causes) or ("none" if ok else None)}


def _metric_cells(metric: str, key: str, runs: list[dict],
                  baseline: tuple[str, list[dict]] | None) -> dict[str, Cell]:
    own = summarise(runs, key)
    base = summarise(baseline[1], key) if baseline else SeedSummary(0, None, None)
    change = None if own.median is None or base.median is None else own.median - base.median
    return {"seeds": own.seeds, "metric": metric, "median": own.median,
            "baseline": baseline[0] if baseline else None, "baseline seeds": base.seeds,
            "baseline median": base.median, "change": change,
            f"baseline spread ({SPREAD})": base.spread,
            "verdict": verdict(change, base, own.seeds) if baseline
            else "n/a (no 1-device baseline)"}


def change_rows(records: list[dict]) -> list[dict[str, Cell]]:
    """One row per N-device configuration and quality metric of its task (CHANGE_COLUMNS);
    profiled runs are left out, failed and diverged ones count in 'runs ok' only."""
    groups: dict[Configuration, list[dict]] = defaultdict(list)
    for r in records:
        if not is_profiled(r):
            groups[configuration(r)].append(r)
    rows = []
    for config in sorted((c for c in groups if c.devices > 1), key=_order):
        runs = groups[config]
        found = find_baseline(config, groups)
        baseline = (f"{found.backend} x1", groups[found]) if found else None
        task = task_of_record(runs[0])
        cells = _config_cells(config, runs)
        for metric in task.judged:  # the task's quality figures whose change is judged
            rows.append({**cells, **_metric_cells(metric, task.quality_columns[metric], runs,
                                                  baseline)})
    return [{column: row[column] for column in CHANGE_COLUMNS} for row in rows]


GRID_CAPTION = "Changes at a glance"
GRID_NOTE = ("Each cell: the change of the median against the 1-device baseline's and, in "
             "brackets, the baseline's seed spread (max-min); * where the change is beyond it. "
             "The next table has each figure's seeds, medians and causes.")
GRID_KEY = ("backend", "devices", "launcher", "modes", "model", "dataset", "batch", "lr",
            "budget", "baseline")  # a configuration's columns in the grid


def _grid_cell(row: dict[str, Cell]) -> str:
    if row["change"] is None:
        return "n/a"
    spread = "n/a" if row[f"baseline spread ({SPREAD})"] is None \
        else f"{row[f'baseline spread ({SPREAD})']:.3f}"
    beyond = " *" if row["verdict"] == "beyond seed noise" else ""
    return f"{row['change']:+.3f} ({spread}){beyond}"


def change_grid(rows: list[dict[str, Cell]]) -> tuple[tuple[str, ...], list[dict[str, Cell]]]:
    """change_rows' figures that their task places in a grid (Quality.grid), one line per
    configuration and grid row, a column per grid column (the detector: a line per figure and
    split, a column per object size); ((), []) when no row's task has a grid."""
    lines: dict[tuple, dict[str, Cell]] = {}
    columns: dict[str, None] = {}
    for row in rows:
        grid = {q.column: q.grid for q in task_of_model(row["model"]).quality}[row["metric"]]
        if grid is not None:
            line, column = grid
            key = (*(row[k] for k in GRID_KEY), line)
            lines.setdefault(key, {**{k: row[k] for k in GRID_KEY}, "figure": line})
            lines[key][column] = _grid_cell(row)
            columns[column] = None
    if not lines:
        return (), []
    headers = (*GRID_KEY, "figure", *columns)
    return headers, [{h: cells.get(h) for h in headers} for cells in lines.values()]


def change_summary(rows: list[dict[str, Cell]]) -> str | None:
    """The headline's line: how many N-device configurations changed a metric beyond seed
    noise, naming them; None where no configuration could be judged (fewer than 3 seeds)."""
    judged = [r for r in rows if r["verdict"] in ("beyond seed noise", "within seed noise")]
    if not judged:
        return None
    def name(r: dict[str, Cell]) -> str:
        return f"{r['backend']} x{r['devices']}"

    configs = list(dict.fromkeys(map(name, judged)))
    beyond = {}
    for r in judged:
        if r["verdict"] == "beyond seed noise":
            beyond.setdefault(name(r), []).append(f"{r['metric']} {r['change']:+.3g}")
    detail = "; ".join(f"{config}: {', '.join(changes)}" for config, changes in beyond.items())
    return (f"Did N devices change the result: {len(beyond)} of {len(configs)} N-device "
            "configuration(s) with 3 or more seeds changed a quality metric beyond the "
            "1-device baseline's seed-to-seed spread" + (f" ({detail})" if detail else "")
            + "; the section Did N devices change the result has every metric and its causes.")
