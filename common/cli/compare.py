"""``parbench compare``: every chosen backend at every device count, each run in its own
process tree, in round-robin order (optionally after discarded warm-up runs), then the report.
Each finished run's record is written at once, so an interrupted sweep keeps them, and
``--resume`` skips configurations that already have an ok record."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from itertools import product
from pathlib import Path

import numpy as np

from parbench.base.devices import cpu_count
from parbench.base.errors import Unavailable, UsageError
from parbench.base.files import private_tempdir
from parbench.base.options import SEED
from parbench.launch.config import Plan, RunConfig, resolve, sized
from parbench.launch.harness import Prepared, kept_record, prepare, run_once, spec_hash
from parbench.launch.lifetime import raise_if_stopping
from parbench.results.records import BUSY_LOAD_PER_CORE, machine_busy, save_record
from parbench.run.registry import BACKENDS, FRAMEWORKS, Backend

from .sweep_state import Sweep


@dataclass(frozen=True)
class Skipped:
    backend: str
    devices: int
    reason: str


def choose_backends(names: list[str], framework: str | None) -> list[Backend]:
    """The named backends (each must be installed, and of ``framework`` when it is given), or
    every installed one (of ``framework``)."""
    unknown = [n for n in names if n not in BACKENDS]
    if unknown:
        raise UsageError(f"unknown backend(s) {', '.join(unknown)}; see 'parbench list'")
    foreign = [n for n in names if framework and BACKENDS[n].framework != framework]
    if foreign:
        raise UsageError(f"--framework {framework}, but {', '.join(foreign)} "
                         f"{'is' if len(foreign) == 1 else 'are'} not of it")
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


def sweep_configs(base: RunConfig, backends: list[Backend], counts: list[int],
                  thread_counts: list[int | None] | None = None,
                  wanted: Callable[[Backend, int], bool] | None = None,
                  seeds: list[int] | None = None
                  ) -> tuple[list[tuple[RunConfig, Plan]], list[Skipped]]:
    """Configurations to run (each backend at each device count and, with ``thread_counts``,
    each count of threads per worker, with ``seeds`` each seed; ``wanted`` may leave some
    out), each with its plan, and those this machine or backend cannot run (with why); an
    option that is wrong for one of them (a batch the device count does not divide) is a
    UsageError, and nothing runs."""
    runnable, skipped = [], []
    for backend in backends:
        for devices in counts:
            if (devices > 1 and not backend.parallel) or (wanted and not wanted(backend,
                                                                                 devices)):
                continue  # a single-device backend has nothing to show at N devices
            for threads, seed in product(thread_counts or [base.threads], seeds or [base.seed]):
                cfg = replace(base, backend=backend.name, devices=devices, threads=threads,
                              seed=seed)
                try:
                    plan = resolve(cfg)
                except Unavailable as err:  # the machine's or the backend's limit: skip
                    skipped.append(Skipped(backend.name, devices, str(err)))
                    continue
                except UsageError as err:  # the input's own fault: nothing runs
                    raise UsageError(f"{backend.name} x{devices}: {err}") from None
                runnable.append((cfg, plan))
    return runnable, list(dict.fromkeys(skipped))  # a limit is said once, not once per seed


def parse_seeds(count: int | None, first: int) -> list[int] | None:
    """--seeds K: the seeds first, first + 1, ..., each a configuration of the sweep."""
    if count is None:
        return None
    if count < 1:
        raise UsageError(f"--seeds wants 1 or more; got {count}")
    if first + count - 1 > SEED.high:
        raise UsageError(f"--seeds {count} from --seed {first} passes the largest seed "
                         f"{int(SEED.high)}")
    return list(range(first, first + count))


def headline_backends(framework: str | None) -> tuple[list[Backend], Callable[[Backend, int],
                                                                              bool]]:
    """--headline: each installed framework's declared representatives (its single backend at
    1 device, its representative on several) and the filter that keeps only those pairs."""
    chosen, singles, several = [], set(), set()
    for info in FRAMEWORKS.values():
        if info.missing_reason() is None and framework in (None, info.name):
            singles.add(info.single)
            several.add(info.representative)
            chosen += [BACKENDS[name] for name in (info.single, info.representative)
                       if name in BACKENDS and BACKENDS[name].missing_reason() is None]
    if not chosen:
        raise UsageError("--headline: no framework is installed here; see 'parbench list'")
    return chosen, lambda backend, devices: backend.name in (singles if devices == 1
                                                             else several)


def parse_thread_counts(text: str | None) -> list[int | None] | None:
    """--thread-counts 1,2: threads per worker, each a configuration of the sweep."""
    if text is None:
        return None
    try:
        counts = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise UsageError(f"--thread-counts wants a comma-separated list like 1,2; got {text!r}")
    if not counts or counts[0] < 1:
        raise UsageError(f"--thread-counts wants counts of at least 1; got {text!r}")
    return counts


def busy_warning(load_1m: float, cores: int) -> str | None:
    """The line ``compare`` prints before starting on a machine that is already busy, else
    None: a job beside a sweep slows its runs (one moved a torch step from 39 to 396 ms), and
    a figure measured that way looks just like a quiet one."""
    if not machine_busy(load_1m, cores):
        return None
    return (f"parbench: warning: the machine is busy (1-minute load {load_1m:.1f} on {cores} "
            f"cores, above {BUSY_LOAD_PER_CORE:g} x cores); speed figures may be noisy")


def warn_if_busy() -> None:
    """Print ``busy_warning`` for this machine now, on stderr."""
    warning = busy_warning(os.getloadavg()[0], cpu_count())
    if warning:
        print(warning, file=sys.stderr, flush=True)


@dataclass
class SweepResult:
    statuses: list[str] = field(default_factory=list)  # one per run, kept ones included
    unsaved: list[str] = field(default_factory=list)  # records that missed --out, and where


@dataclass(frozen=True)
class Slot:
    """One place in a sweep's order: a warm-up run or a repeat of one configuration."""

    config: int  # index into the sweep's configurations
    index: int  # 0-based warm-up or repeat number
    warmup: bool


def round_order(configs: int, order_seed: int, round_index: int,
                warmup: bool = False) -> list[int]:
    """The order of the configurations in one round (of warm-ups or of repeats): a permutation
    drawn from the sweep's recorded seed and the round, so no configuration always runs first
    (after the one before it warmed the caches) or last, and the order can be told again
    from the record."""
    rng = np.random.default_rng([order_seed, int(warmup), round_index])
    return [int(c) for c in rng.permutation(configs)]


def schedule(repeats: list[int], warmup_runs: int, all_kept: set[int],
             order_seed: int) -> list[Slot]:
    """Rounds: warm-up 1 of every configuration, warm-up 2, ..., then repeat 0 of every
    configuration, repeat 1, ..., each round in its own shuffled order (``round_order``), so
    that slow drift of the machine's speed (another job starting, caches filling, heat)
    moves every configuration of a round together and cancels in a per-round ratio
    (parbench.results.paired). Configurations in ``all_kept`` (--resume: every repeat has an
    ok record) run nothing, so they get no warm-up either."""
    warm = [Slot(c, k, True) for k in range(warmup_runs)
            for c in round_order(len(repeats), order_seed, k, warmup=True)
            if c not in all_kept]
    return warm + [Slot(c, r, False) for r in range(max(repeats, default=0))
                   for c in round_order(len(repeats), order_seed, r) if r < repeats[c]]


def _prepare_all(configs: list[tuple[RunConfig, Plan]], stack: ExitStack) -> list[Prepared]:
    """Every configuration's inputs, on disk until ``stack`` closes: round-robin needs them
    all at once. Configurations that differ only in what a sweep varies (backend, device
    count) train on the same data and weights, so they share one folder and one dataset in
    memory: a sweep holds one copy of cifar10 (0.7 GB as float32), not one per configuration."""
    firsts: dict[tuple, Prepared] = {}
    prepared = []
    for cfg, plan in configs:
        key = cfg.inputs_key()  # all that prepare() writes
        if key not in firsts:
            firsts[key] = prepare(cfg, Path(stack.enter_context(
                private_tempdir("parbench-inputs-"))), plan)
        first = firsts[key]
        plan = sized(plan, cfg, len(first.dataset.y_train))
        prepared.append(replace(first, cfg=cfg, plan=plan, spec_sha256=spec_hash(
            first.spec, first.dataset, plan, cfg)))
    return prepared


# (round index, that round's seconds, the sweep's seconds so far) -> whether to stop there
AfterRound = Callable[[int, float, float], bool]


def run_sweep(configs: list[tuple[RunConfig, Plan]], out: Path, resume: bool,
              warmup_runs: int, sweep: Sweep, after_round: AfterRound | None = None
              ) -> SweepResult:
    """Run every configuration's warm-ups, then its repeats, in rounds (see ``schedule``),
    writing each record as soon as it exists; warm-up runs are not written. ``after_round``,
    asked at the end of each round of repeats, may stop the sweep there."""
    start, result = time.monotonic(), SweepResult()
    with ExitStack() as stack:
        prepared = _prepare_all(configs, stack)
        kept = {(c, r) for c, p in enumerate(prepared) for r in range(p.cfg.repeats)
                if resume and kept_record(out, p, r)}
        all_kept = {c for c, p in enumerate(prepared)
                    if all((c, r) in kept for r in range(p.cfg.repeats))}
        slots = schedule([p.cfg.repeats for p in prepared], warmup_runs, all_kept,
                         sweep.order_seed)
        positions, round_start = _positions(slots), start
        seeded = len({p.cfg.seed for p in prepared}) > 1  # the label then says each one's
        for done, slot in enumerate(slots, 1):
            raise_if_stopping()
            p = prepared[slot.config]
            label = _label(done, len(slots), slot, p, warmup_runs, after_round is None, seeded)
            if not slot.warmup and (slot.config, slot.index) in kept:
                _say(f"{label}: kept (an ok record exists)", start)
                result.statuses.append("ok")
            else:
                _say(f"{label}: running", start)
                status, problem = _run_slot(p, slot, out, result, sweep.block(positions[slot]))
                left = f", {len(slots) - done} left" if after_round is None else ""
                _say(f"{label}: {status}{' (discarded)' if slot.warmup else ''}{left}"
                     + (f"; {problem}" if problem else ""), start)
            now = time.monotonic()
            if slot.warmup or not _ends_round(slots, done):
                round_start = now if slot.warmup else round_start
                continue
            if after_round and after_round(slot.index, now - round_start, now - start):
                break
            round_start = now
    return result


def _label(done: int, total: int, slot: Slot, prepared: Prepared, warmup_runs: int,
           fixed: bool, seeded: bool = False) -> str:
    """'[3/8] torch-ddp x2 repeat 2/4' ('... x2 seed 1 repeat 1/1' in a sweep of seeds); a
    sweep that stops on its answers knows no total: '[3] torch-ddp x2 round 2'."""
    what = f"{prepared.cfg.backend} x{prepared.plan.world_size}" + (
        f" ({prepared.plan.threads} thread(s))" if prepared.cfg.threads else "") + (
        f" seed {prepared.cfg.seed}" if seeded else "")
    if slot.warmup:
        return f"[{done}{f'/{total}' if fixed else ''}] {what} warm-up {slot.index + 1}/" \
               f"{warmup_runs}"
    if fixed:
        return f"[{done}/{total}] {what} repeat {slot.index + 1}/{prepared.cfg.repeats}"
    return f"[{done}] {what} round {slot.index + 1}"


def _ends_round(slots: list[Slot], done: int) -> bool:
    """Whether slot ``done`` (1-based) is the last of its round of repeats."""
    return done == len(slots) or slots[done].index != slots[done - 1].index


def _positions(slots: list[Slot]) -> dict[Slot, int]:
    """Each slot's place in its round (warm-ups and repeats each counted in their own)."""
    seen: dict[tuple[bool, int], int] = {}
    positions = {}
    for slot in slots:
        round_key = (slot.warmup, slot.index)
        positions[slot] = seen.get(round_key, 0)
        seen[round_key] = positions[slot] + 1
    return positions


def _run_slot(prepared: Prepared, slot: Slot, out: Path, result: SweepResult,
              sweep_block: dict) -> tuple[str, str | None]:
    """Run one slot: a repeat's record is written and counted in ``result``, a warm-up's is
    dropped (it only warms file-system and compile caches). (status, problem writing it)."""
    record = run_once(prepared, slot.index, sweep=sweep_block).record  # no --profile here
    if slot.warmup:
        return record["status"], None
    _, problem = save_record(out, record)
    result.statuses.append(record["status"])
    result.unsaved += [problem] if problem else []
    return record["status"], problem


def _say(message: str, start: float) -> None:
    print(f"{message} ({time.monotonic() - start:.0f} s elapsed)", file=sys.stderr, flush=True)
