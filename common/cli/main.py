"""The ``parbench`` command: list, run, compare, check, report, parity, slurm, k8s, peak,
explain, data and convert."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from tabulate import tabulate

from parbench.base.errors import UsageError
from parbench.base.files import private_tempdir, remove_stale_tempdirs
from parbench.launch.lifetime import Terminated, become_subreaper, handle_termination
from parbench.launch.options import OPTIONS
from parbench.results.html_report import write_report
from parbench.results.records import check_folder
from parbench.run.registry import BACKENDS, FRAMEWORKS, REFERENCE

from .compare_command import add_compare_parser
from .convert_command import add_convert_parser
from .data_command import add_data_parser
from .explain import add_explain_parser
from .k8s import add_k8s_parser
from .parity import FAMILIES
from .parsing import OneLineParser
from .peak import add_peak_parser
from .readable import readable_records
from .run_command import add_node_options, add_run_options, cmd_run
from .slurm import add_slurm_parser

EXIT_USAGE = 2
REPORT_FORMATS = ("md", "csv", "html")


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
    records, unreadable = readable_records(Path(args.dir), args.strict)
    text = write_report(records, fmt, output, Path(args.plots) if args.plots else None,
                        unreadable)
    if output is None:
        print(text, end="")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="parbench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="backends and whether they can run here").set_defaults(
        func=cmd_list)
    run = sub.add_parser("run", help="train one backend and write records")
    run.add_argument("backend", help="see 'parbench list'")
    OPTIONS["devices"].add_to(run)
    add_run_options(run, "run")
    add_node_options(run)
    run.set_defaults(func=cmd_run)
    add_compare_parser(sub)
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
                        "warmup-cosine) or centernet (the detector on the faces: plain SGD "
                        "across frameworks, AdamW on N devices against one)")
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
    add_k8s_parser(sub)
    add_peak_parser(sub)
    add_explain_parser(sub)
    add_data_parser(sub)
    add_convert_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:  # argparse's refusals too are one line (OneLineParser), before anything starts
        args = build_parser().parse_args(argv)
    except UsageError as err:
        return _refused(err)
    become_subreaper()  # a worker whose launcher died stays ours to find and end
    handle_termination()  # SIGTERM and SIGHUP clean up like Ctrl-C
    remove_stale_tempdirs()
    try:
        return args.func(args)
    except UsageError as err:
        return _refused(err)
    except KeyboardInterrupt as stop:
        signum = stop.signum if isinstance(stop, Terminated) else signal.SIGINT
        print(f"parbench: {signal.Signals(signum).name}: stopped; every process of the run "
              "was ended, and records already written are kept", file=sys.stderr)
        return 128 + signum


def _refused(err: UsageError) -> int:
    """Bad input: one line on stderr, exit code 2."""
    print(f"parbench: error: {err}", file=sys.stderr)
    return EXIT_USAGE
