"""One repeat's record, built in one place: from the checked configuration, how the repeat went,
what each device was fed and, for a profiled run, the ranks' profiled windows. The profile
document is returned beside the record, never on it, so nothing private can reach a record
file; ``records.write_record`` validates the record when it is written."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Protocol

from parbench.base.devices import gpu_models
from parbench.contract.spec import ModelSpec
from parbench.contract.tasks import Task
from parbench.results.metrics import aggregate
from parbench.results.records import SCHEMA_VERSION, name_of
from parbench.results.utilisation import flops_metrics, peak_threads
from parbench.run.loop import RankLog
from parbench.run.profiling import document, summary

from .checkpoints import record_fields as checkpoint_fields
from .config import Plan, RunConfig
from .envinfo import machine_env
from .supervise import allocator_env


class Ran(Protocol):
    """What the record reads of a repeat's ``harness.Execution``; named by its shape because
    the harness imports this module."""

    status: str
    error: str | None
    logs: list[RankLog] | None
    launch: float
    duration: float
    load: dict
    diverged: dict | None
    run_id: str


@dataclass(frozen=True)
class Parts:
    """Everything one repeat's record is made of. The configuration's parts come from the
    harness's Prepared, taken apart so that this module need not import the harness."""

    cfg: RunConfig
    plan: Plan
    task: Task
    spec: ModelSpec
    spec_sha256: str
    variant: dict  # harness.run_variant(plan): part of the record's name
    repeat: int
    run: Ran
    fed: dict | None = None  # metrics.input of an ok run (results.samples.input_metrics)
    sweep: dict | None = None  # the record's sweep block: a compare sweep's round


@dataclass(frozen=True)
class Outcome:
    """A repeat's record and, for a profiled ok run, its profile document, which ``parbench
    run`` writes next to the record as the file ``record["profile"]["file"]`` names."""

    record: dict
    profile: dict | None = None


def build(parts: Parts) -> Outcome:
    """The record of one repeat, ok or not, and a profiled ok run's profile document; the
    record keeps the document's summary under ``profile``, so the report needs no other file."""
    record = _record(parts)
    run = parts.run
    if run.status != "ok" or not parts.plan.profile:
        return Outcome(record)
    name = name_of(record)
    profile = document(record, name, [(log.rank, log.profile) for log in run.logs])
    record["profile"] = summary(profile)
    return Outcome(record, profile)


def _framework_env(parts: Parts) -> dict:
    """env's framework part, as the ranks described it (empty lists on a run without logs)."""
    logs = parts.run.logs or []
    described = logs[0].describe if logs else {}
    return {"framework": parts.plan.backend.framework,
            "framework_version": described.get("framework_version"),
            "device_names": [name for log in logs
                             for name in log.describe.get("device_names", [])],
            # the machine's GPU behind each device of each rank (empty on CPU)
            "gpus": [gpu for log in logs for gpu in log.describe.get("gpus", [])],
            "cuda_version": described.get("cuda_version"),
            "nccl_version": described.get("nccl_version")}


def _metrics(parts: Parts, framework_env: dict) -> dict | None:
    """An ok run's metrics from its rank logs, with its FLOPs and what fed it; None otherwise."""
    cfg, plan, run = parts.cfg, parts.plan, parts.run
    if run.status != "ok":
        return None
    metrics = aggregate(run.logs, parts.task, plan.global_batch, run.launch,
                        None if plan.target is None else (plan.target, cfg.target))
    metrics["flops"] = _flops(parts, metrics, framework_env)
    if parts.fed is not None:
        metrics["input"] = parts.fed
    return metrics


def _flops(parts: Parts, metrics: dict, framework_env: dict) -> dict:
    """metrics.flops: the spec's FLOPs against the steady step time and this machine's peaks
    (a GPU run's GPU model read here, on node 0: the nodes of one run are taken to be alike)."""
    plan = parts.plan
    hardware = {"framework": plan.backend.framework,
                "framework_version": framework_env["framework_version"],
                "compute_dtype": metrics["compute_dtype"], "nodes": plan.nnodes,
                "peak_threads": peak_threads(plan.threads, plan.backend.one_process,
                                             plan.world_size // plan.nnodes),
                "gpu_model": (gpu_models() or [None])[0] if framework_env["gpus"] else None}
    return flops_metrics(parts.spec, plan.global_batch, metrics["step_time_ms"]["median"],
                         plan.world_size, hardware)


def _dataset_note(task: Task, dataset: str) -> list[str]:
    note = task.record_notes.get(dataset)
    return [note] if note else []


def _record(parts: Parts) -> dict:
    """The record's fields, in the order records have always had them."""
    cfg, plan, run = parts.cfg, parts.plan, parts.run
    logs = run.logs
    described = logs[0].describe if logs else {}
    framework_env = _framework_env(parts)
    extra = {k: v for k, v in described.items() if k not in framework_env and k != "notes"}
    return {
        "schema_version": SCHEMA_VERSION, "run_id": run.run_id,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "backend": cfg.backend, "framework": plan.backend.framework,
        "strategy": plan.backend.strategy, "launcher": plan.launcher,
        "world_size": plan.world_size, "nnodes": plan.nnodes, "node_rank": 0,
        "hosts": [log.host for log in logs or []], "status": run.status, "error": run.error,
        "seed": cfg.seed, "repeat": parts.repeat,
        **({"sweep": parts.sweep} if parts.sweep else {}), "global_batch": plan.global_batch,
        "per_device_batch": plan.per_device_batch, "batch_mode": plan.batch_mode,
        "lr": plan.optimizer.lr, "lr_scaling": cfg.lr_scaling,
        "steps": len(logs[0].step_s) if run.status in ("ok", "preempted") else plan.total_steps,
        "optimizer": plan.optimizer.as_dict(), "dataset": cfg.dataset,
        "task": parts.task.name, "model": cfg.model, "spec_sha256": parts.spec_sha256,
        "config": cfg.as_dict(), "variant": parts.variant, "modes": plan.modes.as_dict(),
        "metrics": _metrics(parts, framework_env),
        "env": {**machine_env(plan.threads), **framework_env, **extra,
                "network_isolated": plan.isolate_network, "allocator": allocator_env(),
                **run.load},
        "duration_s": run.duration,
        "notes": [*described.get("notes", []), *_dataset_note(parts.task, cfg.dataset)],
        **({"diverged": run.diverged} if run.diverged else {}),
        **checkpoint_fields(plan, logs, cfg.checkpoint_dir),
    }
