"""``parbench compare``: every chosen backend at every device count, each run in its own
process tree, then the report. Each finished run's record is written at once, so an interrupted
sweep keeps them, and ``--resume`` skips configurations that already have an ok record."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from .backends import BACKENDS, Backend
from .config import RunConfig, UsageError, resolve
from .harness import Prepared, prepare, run_once
from .lifetime import private_tempdir
from .results import record_name, run_variant, save_record


@dataclass(frozen=True)
class Skipped:
    backend: str
    devices: int
    reason: str


def choose_backends(names: list[str], framework: str | None) -> list[Backend]:
    """The named backends (each must be installed), or every installed one."""
    unknown = [n for n in names if n not in BACKENDS]
    if unknown:
        raise UsageError(f"unknown backend(s) {', '.join(unknown)}; see 'parbench list'")
    chosen = [BACKENDS[n] for n in names] or [
        b for b in BACKENDS.values() if b.missing_reason() is None
        and (framework is None or b.framework == framework)]
    missing = [f"{b.name} ({b.missing_reason()})" for b in chosen if b.missing_reason()]
    if missing:
        raise UsageError(f"not installed here: {'; '.join(missing)}")
    if not chosen:
        raise UsageError("no backend is installed here; see 'parbench list'")
    return chosen


def parse_device_counts(text: str) -> list[int]:
    try:
        counts = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise UsageError(f"--devices wants a comma-separated list like 1,2; got {text!r}")
    if not counts or counts[0] < 1:
        raise UsageError(f"--devices wants counts of at least 1; got {text!r}")
    return counts


def sweep_configs(base: RunConfig, backends: list[Backend],
                  counts: list[int]) -> tuple[list[RunConfig], list[Skipped]]:
    """Configurations to run, and those this machine or backend cannot run (with why)."""
    runnable, skipped = [], []
    for backend in backends:
        for devices in counts:
            cfg = replace(base, backend=backend.name, devices=devices)
            if devices > 1 and not backend.parallel:
                continue  # a single-device backend has nothing to show at N devices
            try:
                resolve(cfg)
            except UsageError as err:
                skipped.append(Skipped(backend.name, devices, str(err)))
                continue
            runnable.append(cfg)
    return runnable, skipped


def _kept(out: Path, prepared: Prepared, repeat: int) -> Path | None:
    """The ok record of exactly this configuration and repeat, when one exists."""
    plan = prepared.plan
    variant = run_variant(plan)
    path = out / record_name(prepared.cfg.backend, plan.launcher, plan.world_size,
                             prepared.spec_sha256, variant, repeat)
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    same = (record.get("status") == "ok" and record.get("spec_sha256") == prepared.spec_sha256
            and record.get("variant") == variant and record.get("launcher") == plan.launcher)
    return path if same else None


@dataclass
class SweepResult:
    statuses: list[str] = field(default_factory=list)  # one per run, kept ones included
    unsaved: list[str] = field(default_factory=list)  # records that missed --out, and where


def run_sweep(configs: list[RunConfig], out: Path, resume: bool) -> SweepResult:
    """Run every configuration's repeats, writing each record as soon as it exists."""
    total = sum(cfg.repeats for cfg in configs)
    done, start, result = 0, time.monotonic(), SweepResult()
    for cfg in configs:
        with private_tempdir("parbench-inputs-") as shared:
            prepared = prepare(cfg, Path(shared))
            for repeat in range(cfg.repeats):
                done += 1
                label = (f"[{done}/{total}] {cfg.backend} x{prepared.plan.world_size} "
                         f"repeat {repeat + 1}/{cfg.repeats}")
                kept = _kept(out, prepared, repeat) if resume else None
                if kept:
                    _say(f"{label}: kept (an ok record exists)", start)
                    result.statuses.append("ok")
                    continue
                _say(f"{label}: running", start)
                record = run_once(prepared, repeat)
                _, problem = save_record(out, record)
                result.statuses.append(record["status"])
                result.unsaved += [problem] if problem else []
                _say(f"{label}: {record['status']}, {total - done} left"
                     + (f"; {problem}" if problem else ""), start)
    return result


def _say(message: str, start: float) -> None:
    print(f"{message} ({time.monotonic() - start:.0f} s elapsed)", file=sys.stderr, flush=True)
