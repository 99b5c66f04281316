"""The ``parbench`` command: list, run, compare, check, report, parity, slurm and peak."""

from __future__ import annotations

import argparse
import signal
import sys
from dataclasses import replace
from pathlib import Path

from tabulate import tabulate

from parbench.base.errors import UsageError
from parbench.base.files import private_tempdir, remove_stale_tempdirs
from parbench.launch.lifetime import Terminated, become_subreaper, handle_termination
from parbench.launch.options import OPTIONS
from parbench.results.html_report import write_report
from parbench.results.records import FolderCheck, check_folder, probe_folder
from parbench.results.sequential import DEFAULT_BUDGET_MINUTES, MAX_ROUNDS
from parbench.run.registry import BACKENDS, FRAMEWORKS, REFERENCE

from .compare import (
    AfterRound,
    choose_backends,
    parse_device_counts,
    run_sweep,
    sweep_configs,
    warn_if_busy,
)
from .explain import add_explain_parser
from .parity import FAMILIES
from .peak import add_peak_parser
from .run_command import add_node_options, add_run_options, cmd_run, config_from_args
from .slurm import add_slurm_parser
from .sweep_state import Sweep, open_sweep, save_sweep
from .until_clear import UntilClear, checked_until

EXIT_USAGE = 2
REPORT_FORMATS = ("md", "csv", "html")


def cmd_compare(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    if cfg.nnodes != 1:  # a config file may say so: compare sweeps this machine only
        raise UsageError("compare sweeps this machine; a multi-node run is one 'parbench run' "
                         "per node (docs/multinode.md)")
    if cfg.profile:  # compare's records feed the performance tables, which profiles never do
        raise UsageError("--profile is for 'parbench run': profiled runs are never compared")
    if args.save_weights:
        raise UsageError("--save-weights is for 'parbench run': compare keeps no weights")
    until = None
    if args.until_ci is not None or args.budget is not None:
        if args.repeats is not None:
            raise UsageError("--repeats or --until-ci: a sweep that stops when its answers are "
                             "clear runs as many rounds as that takes, within --budget")
        until = checked_until(args.until_ci, args.budget)
        cfg = replace(cfg, repeats=MAX_ROUNDS)
    backends = choose_backends(args.backends, args.framework)
    configs, skipped = sweep_configs(cfg, backends, parse_device_counts(args.device_counts))
    for skip in skipped:
        print(f"skipped {skip.backend} x{skip.devices}: {skip.reason}", file=sys.stderr)
    if not configs:
        raise UsageError("nothing to run: every configuration was skipped")
    if args.warmup_runs < 0:
        raise UsageError(f"--warmup-runs wants 0 or more; got {args.warmup_runs}")
    if args.order_seed is not None and not 0 <= args.order_seed < 2**31:
        raise UsageError(f"--order-seed wants 0 to 2**31-1; got {args.order_seed}")
    out, report_dir = Path(cfg.out), Path(args.report_dir)
    probe_folder(out, "--out")
    probe_folder(report_dir, "--report-dir")
    html = _has_matplotlib()
    if not html:
        print("parbench: matplotlib is not installed, so the report will be Markdown only "
              "(HTML and plots need pip install 'parbench[report]')", file=sys.stderr)
    identity = open_sweep(out, args.resume, args.order_seed)
    rule = None if until is None else UntilClear(*until, out, identity.id, identity.max_rounds)
    warn_if_busy()
    sweep = run_sweep(configs, out, args.resume, args.warmup_runs, identity,
                      None if rule is None else _asked_after_round(rule, identity, out))
    records, unreadable = _readable_records(out, strict=False)
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


def _asked_after_round(rule: UntilClear, sweep: Sweep, out: Path) -> AfterRound:
    """compare's question after each round under --until-ci: the first round fixes the most
    rounds the budget allows (kept in the sweep, so later records and a resume carry it)."""
    def after_round(index: int, round_s: float, spent_s: float) -> bool:
        if rule.max_rounds is None:
            sweep.max_rounds = rule.plan_rounds(round_s, spent_s)
            save_sweep(out, sweep)
        return rule.after_round(index)

    return after_round


def _has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401  (the HTML report's plots)
    except ImportError:
        return False
    return True


def _readable(folder: Path, strict: bool) -> FolderCheck:
    """``folder`` checked as 'parbench check' checks it, so the two agree on what is readable:
    each file check names (invalid, or a record of a newer schema, or of a task, model or
    framework this version does not know) is named on stderr with its reason and skipped, and
    the report is made from the rest; when ``strict``, or when no record is readable, the whole
    folder is refused."""
    found = check_folder(folder)
    if found.files == 0:
        raise UsageError(f"no records (*.json) under {folder}")
    if found.invalid and (strict or not found.records):
        first = " ".join(found.problems[0].split())  # the error is one line
        raise UsageError(f"{len(found.invalid)} invalid file(s) of the {found.files} under "
                         f"{folder}, first: {first}; see 'parbench check {folder}'")
    for file, reason in found.reasons.items():
        print(f"skipped {file}: {reason}", file=sys.stderr)
    return found


def _readable_records(folder: Path, strict: bool) -> tuple[list[dict], dict[str, str]]:
    """The readable records under ``folder`` (see _readable) and the skipped files' reasons,
    by their path in the folder, so a report reads the same wherever the folder is."""
    found = _readable(folder, strict)
    return found.records, {str(Path(file).relative_to(folder)): reason
                           for file, reason in found.reasons.items()}


def cmd_parity(args: argparse.Namespace) -> int:
    from .parity import installed_frameworks, run_compile_parity, run_parity

    frameworks = args.framework or installed_frameworks()
    if REFERENCE not in installed_frameworks():
        raise UsageError(f"parity compares against {REFERENCE}, which is not installed here")
    unknown = [b for b in args.strategies if b not in BACKENDS]
    if unknown:
        raise UsageError(f"unknown backend(s) {', '.join(unknown)}; see 'parbench list'")
    with private_tempdir("parbench-parity-") as folder:
        check = run_compile_parity if args.compile else run_parity
        checks = check(frameworks, args.strategies, Path(folder), family=args.model)
    rows = [[c.framework, c.check, f"{c.max_rel_diff:.2e}", f"{c.tolerance:.0e}",
             "ok" if c.ok else "OUT OF TOLERANCE"] for c in checks]
    print(tabulate(rows, headers=("compared", "check", "max rel diff", "tolerance", "result"),
                   tablefmt="github"))
    return 0 if all(c.ok for c in checks) else 1


def cmd_list(_args: argparse.Namespace) -> int:
    rows = []
    for backend in BACKENDS.values():
        reason = backend.missing_reason()
        state = "available" if reason is None else f"unavailable: {reason}"
        rows.append([backend.name, backend.strategy, f"launchers {'/'.join(backend.launchers)}",
                     state])
    print(tabulate(rows, tablefmt="plain"))
    for framework in FRAMEWORKS.values():
        if framework.no_sharding:
            print(f"{framework.name}: no sharded backend: {framework.no_sharding}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    """Every problem of every file under the folder, one line each: exactly the files that
    'parbench report' skips and lists apart (both use check_folder)."""
    if not Path(args.dir).is_dir():
        raise UsageError(f"no such folder: {args.dir}")
    found = check_folder(Path(args.dir))
    for problem in found.problems:
        print(problem)
    if found.files == 0:
        print(f"no records (*.json) under {args.dir}")
        return 1
    print(f"{found.files} record(s) checked, {len(found.problems)} problem(s)")
    return 1 if found.problems else 0


def report_format(given: str | None, output: Path | None) -> str:
    """--format, else the --output file's suffix (.md, .csv, .html), else Markdown; a format
    that contradicts the file's suffix is refused rather than written into it."""
    suffix = output.suffix.lstrip(".").lower() if output else ""
    known = suffix in REPORT_FORMATS
    if given and known and given != suffix:
        raise UsageError(f"--format {given} but --output {output} is a .{suffix} file")
    if given is None and output is not None and not known:
        raise UsageError(f"--output {output}: say --format {'/'.join(REPORT_FORMATS)}, or "
                         "name the file .md, .csv or .html")
    return given or (suffix if known else "md")


def cmd_report(args: argparse.Namespace) -> int:
    if not Path(args.dir).is_dir():
        raise UsageError(f"no such folder: {args.dir}")
    output = Path(args.output) if args.output else None
    fmt = report_format(args.format, output)
    records, unreadable = _readable_records(Path(args.dir), args.strict)
    text = write_report(records, fmt, output, Path(args.plots) if args.plots else None,
                        unreadable)
    if output is None:
        print(text, end="")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="parbench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="backends and whether they can run here").set_defaults(
        func=cmd_list)
    run = sub.add_parser("run", help="train one backend and write records")
    run.add_argument("backend", help="see 'parbench list'")
    OPTIONS["devices"].add_to(run)
    add_run_options(run, "run")
    add_node_options(run)
    run.set_defaults(func=cmd_run)
    compare = sub.add_parser("compare", help="run many backends x device counts, then report")
    compare.add_argument("backends", nargs="*", help="default: every installed backend")
    compare.add_argument("--devices", dest="device_counts", default="1,2",
                         help="comma-separated device counts (1,2)")
    compare.add_argument("--framework", choices=tuple(FRAMEWORKS),
                         help="only this framework's installed backends")
    compare.add_argument("--resume", action="store_true",
                         help="skip runs whose configuration already has an ok record")
    compare.add_argument("--report-dir", default="results/report",
                         help="where report.md, report.html and plots go (results/report)")
    # A sweep option, not a RunConfig field: it changes when runs happen, not what one measures.
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
    parity = sub.add_parser("parity", help=f"cross-framework checks against {REFERENCE}")
    parity.add_argument("--framework", action="append",
                        choices=tuple(FRAMEWORKS),
                        help="check only this framework (repeatable); default: all installed")
    parity.add_argument("--strategies", nargs="*", default=[], metavar="BACKEND",
                        help="also check these parallel backends on 2 devices vs single")
    parity.add_argument("--model", choices=tuple(FAMILIES), default="resnet",
                        help="the model family: resnet (default: the CNN models, SGD), vit "
                        "(the transformer, AdamW with gradient clipping) or gpt (the causal "
                        "language model on the synthetic language, AdamW, clipping, "
                        "warmup-cosine)")
    parity.add_argument("--compile", action="store_true",
                        help="instead: each single backend (and --strategies on 2 devices) "
                        "compiled against eager, 10 steps")
    parity.set_defaults(func=cmd_parity)
    check = sub.add_parser("check", help="validate every record in a folder")
    check.add_argument("dir")
    check.set_defaults(func=cmd_check)
    report = sub.add_parser("report", help="comparison tables, environment and plots of the "
                            "records in a folder")
    report.add_argument("dir")
    report.add_argument("--format", choices=REPORT_FORMATS,
                        help="md (default), csv or html; without it, --output's suffix decides")
    report.add_argument("--output", help="write the report here instead of to stdout (html: "
                        "its plots as PNG files next to it)")
    report.add_argument("--plots", metavar="DIR", help="also write every plot as a PNG file here")
    report.add_argument("--strict", action="store_true",
                        help="refuse a folder with any invalid file instead of skipping it")
    report.set_defaults(func=cmd_report)
    add_slurm_parser(sub)
    add_peak_parser(sub)
    add_explain_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    become_subreaper()  # a worker whose launcher died stays ours to find and end
    handle_termination()  # SIGTERM and SIGHUP clean up like Ctrl-C
    remove_stale_tempdirs()
    try:
        return args.func(args)
    except UsageError as err:
        print(f"parbench: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as stop:
        signum = stop.signum if isinstance(stop, Terminated) else signal.SIGINT
        print(f"parbench: {signal.Signals(signum).name}: stopped; every process of the run "
              "was ended, and records already written are kept", file=sys.stderr)
        return 128 + signum

