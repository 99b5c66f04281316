"""The result record: one JSON file per run and repeat, written atomically, and its checks."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import jsonschema
import numpy as np

from .config import Plan, UsageError
from .files import write_atomic
from .loop import RankLog
from .profiling import SUFFIX
from .registry import FRAMEWORKS
from .spec import sha256_of

SCHEMA_VERSION = 5  # 2: variant, env.network_isolated, env.load_1m_start/_end, env.other_cpu_s;
# 3: modes, metrics.compute_dtype and the other observed modes, macro scores, confusion matrix;
# 4: modes.input and .loader_workers, metrics.input (what each device trained on, data waits);
# 5: nnodes, node_rank (the writer), hosts (per rank), metrics.nodes (step time per node).
# Versions 1 to 4 are still read (they ran fp32, eager, without sync BN or accumulation, fed
# from the contract's arrays).
SCHEMA = json.loads((Path(__file__).with_name("record_schema.json")).read_text())
SCHEMA["properties"]["framework"] = {"enum": list(FRAMEWORKS)}  # the registry's, not a copy
STATUSES = ("ok", "failed", "timeout")
BUSY_LOAD_PER_CORE = 0.5  # a run that starts with more load than this per core is noisy
# Where a record goes when --out cannot take it: /dev/shm is memory, so a full disk does not
# stop it.
FALLBACK_FOLDERS = (Path(tempfile.gettempdir()) / "parbench-unsaved",
                    Path("/dev/shm/parbench-unsaved"))


def machine_busy(load_1m: float, cores: int) -> bool:
    """Whether a 1-minute load average means the machine was busy: above BUSY_LOAD_PER_CORE
    per core parbench may use (``env.cores``). compare's warning before a sweep uses it."""
    return load_1m > BUSY_LOAD_PER_CORE * cores


def run_was_busy(record: dict) -> bool | None:
    """Whether other processes competed with this run; None when the record cannot tell
    (schema 1). The measured CPU time of processes outside the run (``env.other_cpu_s``),
    averaged over the run, counts in cores like a load; only without it does the load average
    at the start decide. The load average alone would blame a sweep for itself: it is a
    one-minute moving average, so it still holds the previous run of the same sweep."""
    env = record["env"]
    other, duration = env.get("other_cpu_s"), record.get("duration_s") or 0
    if other is not None and duration > 0:
        return other / duration > BUSY_LOAD_PER_CORE * env["cores"]
    load = env.get("load_1m_start")
    return None if load is None else machine_busy(load, env["cores"])


def run_variant(plan: Plan) -> dict:
    """What a comparison varies besides the spec, the backend, its launcher and the device
    count (which the record name spells out): part of the record name through a hash, so two
    runs that differ in any of them never share a file and --resume never takes one for the
    other. A new run option that changes speed or results belongs here. ``profile`` is there
    only when True and ``modes`` only when one differs from its default, so a plain run keeps
    the name (and --resume match) it had before either existed."""
    changed = plan.modes.changed()
    return {"threads": plan.threads, "nnodes": plan.nnodes,
            **({"profile": True} if plan.profile else {}),
            **({"modes": changed} if changed else {})}


def record_name(backend: str, launcher: str, world_size: int, spec_sha256: str,
                variant: dict, repeat: int) -> str:
    """``<backend>-<launcher>-n<devices>-<spec>-<variant>-r<repeat>.json``: a rerun of the same
    configuration replaces its own earlier record, and nothing else."""
    return (f"{backend}-{launcher}-n{world_size}-{spec_sha256[:10]}-"
            f"{sha256_of(variant)[:6]}-r{repeat}.json")


def name_of(record: dict) -> str:
    return record_name(record["backend"], record["launcher"], record["world_size"],
                       record["spec_sha256"], record["variant"], record["repeat"])


def write_record(folder: Path, record: dict) -> Path:
    target = Path(folder) / name_of(record)
    write_atomic(target, json.dumps(record, indent=1).encode())
    return target


def probe_folder(folder: Path, option: str) -> None:
    """Create ``folder`` and prove a file can be written there, before anything trains: a
    place that cannot take the results is bad input (UsageError), not a lost run."""
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".parbench-probe-"):
            pass
    except OSError as err:
        raise UsageError(f"{option} {folder}: cannot write there "
                         f"({err.strerror or err})") from None


def probe_file(file: Path, option: str) -> None:
    """The same for a file to be written at the end: its folder must take files, and the path
    must not be a folder already."""
    if Path(file).is_dir():
        raise UsageError(f"{option} {file}: is a folder; give a file name")
    probe_folder(Path(file).parent, option)


def save_record(folder: Path, record: dict) -> tuple[Path, str | None]:
    """Write ``record`` into ``folder``, or, when that fails (disk full, folder gone), into the
    first fallback folder that takes it; (path, problem) where problem names what went wrong.
    A record is never dropped: with no writable place at all it is printed to stdout."""
    try:
        return write_record(folder, record), None
    except OSError as err:
        problem = f"could not write the record into {folder} ({err.strerror or err})"
    for fallback in FALLBACK_FOLDERS:
        try:
            path = write_record(fallback, record)
        except OSError:
            continue
        return path, f"{problem}; it was saved to {path} instead"
    print(json.dumps(record))
    return Path("-"), f"{problem}, nor into any of {', '.join(map(str, FALLBACK_FOLDERS))}; " \
        "it was printed to stdout instead"


def _percentiles(step_s: np.ndarray) -> dict:
    p10, median, p90 = np.percentile(step_s * 1000, [10, 50, 90])
    return {"median": float(median), "p10": float(p10), "p90": float(p90)}


def warmup_steps(total: int) -> int:
    """Steps left out of steady-state timing: the first (tracing/compile) and a few more."""
    return min(max(1, total // 10), 5) if total > 1 else 0


SCORES = ("precision_macro", "recall_macro", "f1_macro")


def aggregate(logs: list[RankLog], global_batch: int, launch_time: float,
              target_accuracy: float | None) -> dict:
    """Metrics of a run from its per-process logs; the slowest process defines each step."""
    step_s = np.max([log.step_s for log in logs], axis=0)
    first_steady = warmup_steps(len(step_s))
    rows = np.array([log.rows for log in logs], dtype=float)
    losses = np.array([log.losses for log in logs]).T @ rows / rows.sum()
    steady = step_s[first_steady:]
    evals = logs[0].evals
    timing = _percentiles(steady)
    devices = [mb for log in logs for mb in (log.peak_device_mb or [])]
    reached = [e["train_s"] for e in evals
               if target_accuracy is not None and e["accuracy"] >= target_accuracy]
    observed = logs[0].observed or {}
    graphs = [log.observed.get("compiled_graphs") for log in logs if log.observed]
    return {
        "throughput": global_batch / (timing["median"] / 1000),
        "step_time_ms": timing,
        "steady_steps": int(len(steady)),
        "startup_s": max(log.first_step_start for log in logs) - launch_time,
        "first_step_s": float(step_s[0]),
        "train_s": float(step_s.sum()),
        "eval_s": float(evals[-1]["eval_s"]),
        "final_accuracy": float(evals[-1]["accuracy"]),
        "final_loss": float(evals[-1]["loss"]),
        "loss_curve": [float(v) for v in losses],
        "accuracy_curve": [{k: e[k] for k in ("step", "accuracy", "loss", "train_s",
                                              *SCORES) if k in e} for e in evals],
        **{k: evals[-1][k] for k in (*SCORES, "confusion_matrix")},
        "compute_dtype": observed.get("compute_dtype"),
        "compiled_graphs": None if None in graphs else max(graphs, default=None),
        "sync_bn_layers": observed.get("sync_bn_layers", 0),
        "micro_batches": observed.get("micro_batches", 1),
        "clipped_steps": observed.get("clipped_steps"),
        "target_accuracy": target_accuracy,
        "time_to_target_s": reached[0] if reached else None,
        "peak_rss_mb": [log.peak_rss_mb for log in logs],
        "peak_device_mb": devices or None,
        "nodes": per_node(logs, first_steady),
    }


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


def check_record(record: object) -> list[str]:
    """Every problem with one record (empty when it is valid)."""
    validator = jsonschema.Draft202012Validator(SCHEMA)
    problems = [f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"
                for e in validator.iter_errors(record)]
    if problems or not isinstance(record, dict):
        return problems
    if record["status"] == "ok" and record["metrics"] is None:
        problems.append("metrics: an ok record needs metrics")
    if record["status"] != "ok" and not record["error"]:
        problems.append(f"error: a {record['status']} record needs the error")
    return problems


@dataclass
class FolderCheck:
    files: int  # *.json files found, profile files (*.profile.json) not counted
    records: list[dict]  # the valid ones
    invalid: dict[str, list[str]]  # file -> its problems, for every invalid file

    @property
    def problems(self) -> list[str]:
        """'file: problem', every problem of every invalid file."""
        return [f"{file}: {p}" for file, found in self.invalid.items() for p in found]


def check_folder(folder: Path) -> FolderCheck:
    """Every *.json under ``folder``, validated; profile files (``*.profile.json``, written
    next to profiled records) are not records and are neither checked nor counted."""
    files = sorted(p for p in Path(folder).rglob("*.json") if not p.name.endswith(SUFFIX))
    records, invalid = [], {}
    for file in files:
        try:
            record = json.loads(file.read_text())
        except (OSError, ValueError) as err:
            invalid[str(file)] = [f"not readable JSON ({err})"]
            continue
        found = check_record(record)
        if found:
            invalid[str(file)] = found
        else:
            records.append(record)
    return FolderCheck(len(files), records, invalid)
