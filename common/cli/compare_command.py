"""``parbench compare``: its options, its checks (every one before anything runs), the sweep
(parbench.cli.compare) and the report of the --out folder afterwards."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from parbench.base.errors import UsageError
from parbench.launch.config import Plan, RunConfig
from parbench.results.html_report import write_report
from parbench.results.records import probe_folder
from parbench.results.sequential import DEFAULT_BUDGET_MINUTES, MAX_ROUNDS
from parbench.run.registry import FRAMEWORKS

from .compare import (
    AfterRound,
    choose_backends,
    headline_backends,
    parse_device_counts,
    parse_seeds,
    parse_thread_counts,
    run_sweep,
    sweep_configs,
    warn_if_busy,
)
from .readable import has_matplotlib, readable_records
from .run_command import (
    add_run_options,
    config_from_args,
    refuse_checkpoints,
    refuse_kept_files,
)
from .sweep_state import Sweep, open_sweep, save_sweep
from .until_clear import UntilClear, checked_until

REPRESENTATIVES = [f.representative for f in FRAMEWORKS.values() if f.representative]


def add_compare_parser(sub: argparse._SubParsersAction) -> None:
    compare = sub.add_parser("compare", help="run many backends x device counts, then report")
    compare.add_argument("backends", nargs="*", help="default: every installed backend")
    compare.add_argument("--devices", dest="device_counts", default="1,2",
                         help="comma-separated device counts (1,2)")
    compare.add_argument("--framework", choices=tuple(FRAMEWORKS),
                         help="only this framework's installed backends")
    compare.add_argument("--headline", action="store_true",
                         help="only what the headline ranks: each installed framework's single "
                         "backend at 1 device and its declared representative at the others "
                         f"({', '.join(REPRESENTATIVES)})")
    compare.add_argument("--thread-counts", metavar="T1,T2",
                         help="threads per worker, each count a configuration of the sweep "
                         "(instead of --threads): 1,2 sets one thread against two in one "
                         "sweep")
    compare.add_argument("--seeds", type=int, metavar="K",
                         help="K seeds from --seed on, each a configuration of the sweep: what "
                         "time to target and 'did N devices change the result' compare over "
                         "(3 or more)")
    compare.add_argument("--resume", action="store_true",
                         help="skip runs whose configuration already has an ok record, and go "
                         "on with the same sweep")
    compare.add_argument("--report-dir", default="results/report",
                         help="where report.md, report.html and plots go (results/report)")
    # Sweep options, not RunConfig fields: they change when runs happen, not what one measures.
    compare.add_argument("--warmup-runs", type=int, default=0, metavar="K",
                         help="K discarded runs of each configuration first, to warm file-system "
                         "and compile caches (0)")
    compare.add_argument("--until-ci", type=float, metavar="H",
                         help="add rounds until every headline comparison is decided (its "
                         "interval excludes 1) or its relative half-width is at most H (0.05: "
                         "5 %%), within --budget; a sequential rule keeps the error rate at 5 %% "
                         "(parbench.results.sequential)")
    compare.add_argument("--budget", type=float, metavar="MINUTES",
                         help=f"the whole sweep's wall time under --until-ci "
                         f"({DEFAULT_BUDGET_MINUTES:g})")
    compare.add_argument("--order-seed", type=int, metavar="N",
                         help="the seed each round's shuffled order is drawn from (default: "
                         "a fresh one; each record keeps it)")
    add_run_options(compare, "compare")
    compare.set_defaults(func=cmd_compare)


def cmd_compare(args: argparse.Namespace) -> int:
    cfg, until = _checked_config(args)
    configs = _configs(args, cfg)
    if args.warmup_runs < 0:
        raise UsageError(f"--warmup-runs wants 0 or more; got {args.warmup_runs}")
    if args.order_seed is not None and not 0 <= args.order_seed < 2**31:
        raise UsageError(f"--order-seed wants 0 to 2**31-1; got {args.order_seed}")
    out, report_dir = Path(cfg.out), Path(args.report_dir)
    probe_folder(out, "--out")
    probe_folder(report_dir, "--report-dir")
    html = has_matplotlib()
    if not html:
        print("parbench: matplotlib is not installed, so the report will be Markdown only "
              "(HTML and plots need pip install 'parbench[report]')", file=sys.stderr)
    identity = open_sweep(out, args.resume, args.order_seed)
    rule = None if until is None else UntilClear(*until, out, identity.id, identity.max_rounds)
    warn_if_busy()
    sweep = run_sweep(configs, out, args.resume, args.warmup_runs, identity,
                      None if rule is None else _asked_after_round(rule, identity, out))
    records, unreadable = readable_records(out, strict=False)
    if html:
        write_report(records, "html", report_dir / "report.html", unreadable=unreadable)
    print(write_report(records, "md", report_dir / "report.md", unreadable=unreadable), end="")
    print(f"{len(sweep.statuses)} run(s), records in {out}; report in {report_dir}",
          file=sys.stderr)
    for line in rule.summary() if rule else []:
        print(line, file=sys.stderr)
    for problem in sweep.unsaved:
        print(f"parbench: error: {problem}", file=sys.stderr)
    return 0 if all(s == "ok" for s in sweep.statuses) and not sweep.unsaved else 1


def _checked_config(args: argparse.Namespace) -> tuple[RunConfig, tuple[float, float] | None]:
    """The sweep's run options, and --until-ci's (H, budget seconds) where given."""
    cfg = config_from_args(args)
    if cfg.nnodes != 1:  # a config file may say so: compare sweeps this machine only
        raise UsageError("compare sweeps this machine; a multi-node run is one 'parbench run' "
                         "per node (docs/multinode.md)")
    if cfg.profile:  # compare's records feed the performance tables, which profiles never do
        raise UsageError("--profile is for 'parbench run': profiled runs are never compared")
    refuse_kept_files(args, "compare")
    refuse_checkpoints(cfg, "compare")
    if args.thread_counts is not None and cfg.threads is not None:
        raise UsageError("--threads or --thread-counts: one threads per worker for every "
                         "configuration, or each count a configuration of its own")
    if args.until_ci is None and args.budget is None:
        return cfg, None
    if args.seeds is not None:
        raise UsageError("--seeds or --until-ci: --until-ci decides speed comparisons within "
                         "one seed's configurations; sweep seeds with --repeats")
    if args.repeats is not None:
        raise UsageError("--repeats or --until-ci: a sweep that stops when its answers are "
                         "clear runs as many rounds as that takes, within --budget")
    return replace(cfg, repeats=MAX_ROUNDS), checked_until(args.until_ci, args.budget)


def _configs(args: argparse.Namespace, cfg: RunConfig) -> list[tuple[RunConfig, Plan]]:
    """Every configuration of the sweep, each with its plan; those this machine or backend
    cannot run are said on stderr, and none left is a UsageError."""
    if args.headline and args.backends:
        raise UsageError("--headline runs each framework's declared representatives; name no "
                         "backends beside it")
    backends, wanted = (headline_backends(args.framework) if args.headline
                        else (choose_backends(args.backends, args.framework), None))
    configs, skipped = sweep_configs(cfg, backends, parse_device_counts(args.device_counts),
                                     parse_thread_counts(args.thread_counts), wanted,
                                     parse_seeds(args.seeds, cfg.seed))
    for skip in skipped:
        print(f"skipped {skip.backend} x{skip.devices}: {skip.reason}", file=sys.stderr)
    if not configs:
        raise UsageError("nothing to run: every configuration was skipped")
    return configs


def _asked_after_round(rule: UntilClear, sweep: Sweep, out: Path) -> AfterRound:
    """compare's question after each round under --until-ci: the first round fixes the most
    rounds the budget allows (kept in the sweep, so later records and a resume carry it)."""
    def after_round(index: int, round_s: float, spent_s: float) -> bool:
        if rule.max_rounds is None:
            sweep.max_rounds = rule.plan_rounds(round_s, spent_s)
            save_sweep(out, sweep)
        return rule.after_round(index, round_s, spent_s)

    return after_round
