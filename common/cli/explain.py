"""``parbench explain BACKEND --devices N``: how much of the change N devices make to the
result each known cause carries. It runs, for each of --seeds seeds: the 1-device baseline
(the framework's single backend), the configuration as given at N devices, then that
configuration with each cause its record shows (parbench.results.causes) switched off in turn,
and prints per variant the median quality over the seeds, the change against the baseline,
the seed spread and what the cause carries: change as given - change with it off.

Every run goes through the harness of ``parbench run`` and its record is written under --out
at once, so a run that crashes is a failed record and the others go on. ``--resume`` takes a
seed's ok record from --out instead of running it again: an ablation that was stopped goes on,
and the records of a compare sweep of the same configuration (copied into --out) count."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from parbench.base.errors import Unavailable, UsageError
from parbench.base.files import private_tempdir
from parbench.contract.tasks import task_of_model
from parbench.launch.config import RunConfig, resolve
from parbench.launch.harness import kept_record, prepare, run_once
from parbench.results.accuracy_change import MIN_SEEDS
from parbench.results.causes import Cause, checked_causes
from parbench.results.records import probe_folder, save_record
from parbench.run.modes import MODES, Modes
from parbench.run.registry import BACKENDS

from .explain_table import explain_lines, explain_table
from .run_command import (
    add_run_options,
    config_from_args,
    refuse_checkpoints,
    refuse_kept_files,
)


@dataclass
class Variant:
    """One configuration of the ablation, run once per seed."""

    name: str  # baseline | as given | <cause> off
    config: RunConfig
    cause: Cause | None = None  # the cause it switches off
    why_not: str | None = None  # why it cannot be run (the cause cannot be switched off)
    records: list[dict] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.config.backend} x{self.config.devices}"


@dataclass(frozen=True)
class Ablation:
    """What the command line asks for, every value checked."""

    given: RunConfig  # at N devices, seed = the first seed
    baseline: RunConfig  # the framework's single backend at 1 device
    seeds: tuple[int, ...]
    out: Path
    resume: bool  # take the ok records already in out


def add_explain_parser(sub: argparse._SubParsersAction) -> None:
    explain = sub.add_parser("explain", help="which known cause carries how much of the "
                             "change N devices make to the result (an ablation, 3+ seeds each)")
    explain.add_argument("backend", help="a parallel backend; see 'parbench list'")
    # read as text: a bad count is one line of ours, not argparse's usage block
    explain.add_argument("--devices", dest="device_count", metavar="N",
                         help="devices of the N-device configuration (2 or more)")
    explain.add_argument("--seeds", default=str(MIN_SEEDS), metavar="K",
                         help=f"seeds per variant, from --seed on ({MIN_SEEDS}, at least "
                         f"{MIN_SEEDS}: the seed spread needs them)")
    explain.add_argument("--resume", action="store_true",
                         help="take each run's ok record from --out where one is there "
                         "(written by an earlier explain or compare) instead of running it")
    add_run_options(explain, "explain")
    explain.set_defaults(func=cmd_explain)


def _count(text: str | None, option: str, least: int) -> int:
    try:
        value = int(text) if text is not None else None
    except ValueError:
        value = None
    if value is None or value < least:
        raise UsageError(f"{option} wants a whole number of at least {least}; got "
                         f"{'nothing' if text is None else repr(text)}")
    return value


def _check_backend(name: str) -> None:
    if name not in BACKENDS:
        raise UsageError(f"unknown backend {name!r}; see 'parbench list'")
    if not BACKENDS[name].parallel:
        raise UsageError(f"{name} runs on one device; explain needs a parallel backend")


def _ablation(args: argparse.Namespace) -> Ablation:
    """The checked request; UsageError (exit 2, nothing written) on bad input."""
    _check_backend(args.backend)
    devices = _count(args.device_count, "--devices", 2)
    seeds = _count(args.seeds, "--seeds", MIN_SEEDS)
    refuse_kept_files(args, "explain")
    given = replace(config_from_args(args), devices=devices)
    refuse_checkpoints(given, "explain")
    for wrong, why in ((given.repeats != 1, "explain runs each seed once; give --seeds "
                        "instead of --repeats"),
                       (given.profile, "--profile is for 'parbench run': a profiled run's "
                        "figures are never compared"),
                       (given.nnodes != 1, "explain runs on this machine; --nnodes is 1")):
        if wrong:
            raise UsageError(why)
    baseline, seeds_run = baseline_config(given), tuple(range(given.seed, given.seed + seeds))
    for cfg in (given, baseline):
        resolve(cfg)
    try:
        resolve(replace(given, seed=seeds_run[-1]))
    except UsageError as err:
        raise UsageError(f"--seed {given.seed} with --seeds {seeds} reaches seed "
                         f"{seeds_run[-1]}: {err}") from None
    with private_tempdir("parbench-inputs-") as shared:  # data-dependent checks, before output
        prepare(given, Path(shared))
    out = Path(args.out or f"results/explain/{given.backend}-x{devices}")
    return Ablation(given, baseline, seeds_run, out, args.resume)


def baseline_config(given: RunConfig) -> RunConfig:
    """The framework's single backend on one device, with the modes of ``given`` that mean
    something there (not --sync-bn, nor a sharded backend's own). --lr-scaling linear becomes
    the lr it gives one device, unscaled: the same training, and the same configuration as a
    plain 1-device run of that lr, whose record --resume can take."""
    single = BACKENDS[BACKENDS[given.backend].info.single]
    modes = {name: getattr(given.modes, name) if mode.matters_on_one_device and (
        mode.applies is None or mode.applies(single)) else mode.default
        for name, mode in MODES.items()}
    baseline = replace(given, backend=single.name, devices=1, launcher=None,
                       modes=Modes(**modes))
    if given.lr_scaling == "none":
        return baseline
    return replace(baseline, lr=resolve(baseline).optimizer.lr, lr_scaling="none")


def switched_off(given: RunConfig, cause: Cause) -> Variant:
    """``given`` with ``cause`` switched off, or why that cannot run on this backend."""
    name = f"{cause.name} off"
    if cause.switch_off is None:
        return Variant(name, given, cause, "no run option switches it off on its own")
    config = RunConfig.of(**{**given.as_dict(), **cause.switch_off})
    try:
        resolve(config)
    except (Unavailable, UsageError) as err:
        return Variant(name, config, cause, f"cannot be switched off on {given.backend}: {err}")
    return Variant(name, config, cause)


def _say(message: str, start: float) -> None:
    print(f"{message} ({time.monotonic() - start:.0f} s elapsed)", file=sys.stderr, flush=True)


def run_variant(variant: Variant, plan: Ablation, start: float) -> list[str]:
    """Run every seed of ``variant`` (or, with --resume, take its ok record from --out), each
    record saved at once; the problems saving them."""
    unsaved = []
    for number, seed in enumerate(plan.seeds, 1):
        label = f"{variant.name} ({variant.label}) seed {seed} [{number}/{len(plan.seeds)}]"
        config = replace(variant.config, seed=seed, out=str(plan.out))
        try:
            with private_tempdir("parbench-inputs-") as shared:
                prepared = prepare(config, Path(shared))
                record = kept_record(plan.out, prepared, 0) if plan.resume else None
                if record is not None:
                    _say(f"{label}: kept, its ok record is in {plan.out}", start)
                    variant.records.append(record)
                    continue
                _say(f"{label}: running", start)
                record = run_once(prepared, 0).record  # no --profile
        except UsageError as err:  # a variant's own data check: it cannot run at all
            variant.why_not = f"cannot run: {err}"
            return unsaved
        path, problem = save_record(plan.out, record)
        variant.records.append(record)
        unsaved += [problem] if problem else []
        _say(f"{label}: {record['status']}, {path}", start)
    return unsaved


def cmd_explain(args: argparse.Namespace) -> int:
    plan = _ablation(args)
    probe_folder(plan.out, "--out")
    start, unsaved = time.monotonic(), []
    variants = [Variant("baseline", plan.baseline), Variant("as given", plan.given)]
    for variant in variants:
        unsaved += run_variant(variant, plan, start)
    ok = [r for r in variants[1].records if r["status"] == "ok"]
    checked = checked_causes(ok[0]) if ok else []
    for cause in (c for c in checked if c.applies):
        variants.append(switched_off(plan.given, cause))
        if variants[-1].why_not is None:
            unsaved += run_variant(variants[-1], plan, start)
    task = task_of_model(plan.given.model)
    metric = task.judged[0]  # the task's first judged quality figure
    print(explain_table(variants, metric, task.quality_columns[metric]))
    for line in explain_lines(variants, checked, metric, task.quality_columns[metric]):
        print(line)
    if not ok:
        print(f"no {plan.given.backend} x{plan.given.devices} run finished ok, so no cause "
              "could be read from its record")
    for problem in unsaved:
        print(f"parbench: error: {problem}", file=sys.stderr)
    runs = [r for v in variants for r in v.records]
    print(f"{len(runs)} run(s), records in {plan.out}", file=sys.stderr)
    return 0 if ok and all(r["status"] == "ok" for r in runs) and not unsaved else 1
