"""The result record: one JSON file per run and repeat, written atomically, and its checks."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import jsonschema
import numpy as np

from .loop import RankLog

SCHEMA_VERSION = 1
SCHEMA = json.loads((Path(__file__).with_name("record_schema.json")).read_text())
STATUSES = ("ok", "failed", "timeout")


def record_name(backend: str, world_size: int, spec_sha256: str, repeat: int) -> str:
    """Records are named by configuration, so a rerun replaces its own earlier record."""
    return f"{backend}-n{world_size}-{spec_sha256[:10]}-r{repeat}.json"


def write_record(folder: Path, record: dict) -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / record_name(record["backend"], record["world_size"],
                                  record["spec_sha256"], record["repeat"])
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(record, handle, indent=1)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; records are meant to be shared
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise
    return target


def _percentiles(step_s: np.ndarray) -> dict:
    p10, median, p90 = np.percentile(step_s * 1000, [10, 50, 90])
    return {"median": float(median), "p10": float(p10), "p90": float(p90)}


def warmup_steps(total: int) -> int:
    """Steps left out of steady-state timing: the first (tracing/compile) and a few more."""
    return min(max(1, total // 10), 5) if total > 1 else 0


def aggregate(logs: list[RankLog], global_batch: int, launch_time: float,
              target_accuracy: float | None) -> dict:
    """Metrics of a run from its per-process logs; the slowest process defines each step."""
    step_s = np.max([log.step_s for log in logs], axis=0)
    rows = np.array([log.rows for log in logs], dtype=float)
    losses = np.array([log.losses for log in logs]).T @ rows / rows.sum()
    steady = step_s[warmup_steps(len(step_s)):]
    evals = logs[0].evals
    timing = _percentiles(steady)
    devices = [mb for log in logs for mb in (log.peak_device_mb or [])]
    reached = [e["train_s"] for e in evals
               if target_accuracy is not None and e["accuracy"] >= target_accuracy]
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
        "accuracy_curve": [{k: e[k] for k in ("step", "accuracy", "loss", "train_s")}
                           for e in evals],
        "target_accuracy": target_accuracy,
        "time_to_target_s": reached[0] if reached else None,
        "peak_rss_mb": [log.peak_rss_mb for log in logs],
        "peak_device_mb": devices or None,
    }


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


def check_folder(folder: Path) -> tuple[int, list[str]]:
    """(records checked, problems as 'file: problem') for every *.json under ``folder``."""
    files = sorted(Path(folder).rglob("*.json"))
    problems = []
    for file in files:
        try:
            record = json.loads(file.read_text())
        except (OSError, ValueError) as err:
            problems.append(f"{file}: not readable JSON ({err})")
            continue
        problems += [f"{file}: {p}" for p in check_record(record)]
    return len(files), problems


def load_records(folder: Path) -> list[dict]:
    return [json.loads(f.read_text()) for f in sorted(Path(folder).rglob("*.json"))]
