"""``parbench slurm BACKEND --nodes N [run options]``: print the sbatch script that runs one
``parbench run --from-slurm`` per node (the script itself: parbench.launch.slurm)."""

from __future__ import annotations

import argparse
from typing import NoReturn

from parbench.base.errors import UsageError
from parbench.launch.options import OPTIONS
from parbench.launch.slurm import DEFAULT_MASTER_PORT, sbatch_script
from parbench.run.registry import BACKENDS

from .parsing import OneLineParser
from .run_command import add_run_options


class _Parser(OneLineParser):
    """Its errors name the sub-command: the run options it checks are not slurm's own."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"slurm: {message}")


def _add_slurm_options(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--nodes", type=int, metavar="N", help="nodes to run on (required)")
    add("--gpus-per-node", type=int, default=0, metavar="G",
        help="GPUs per node, each node's --devices (0: CPU nodes)")
    add("--master-port", type=int, default=DEFAULT_MASTER_PORT, metavar="PORT",
        help=f"rendezvous port on the first node ({DEFAULT_MASTER_PORT})")
    add("--time", help="sbatch --time, e.g. 01:00:00")
    add("--partition", help="sbatch --partition")
    add("--job-name", help="sbatch --job-name (parbench-BACKEND)")


def add_slurm_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """The ``slurm`` sub-command; see cmd_slurm for how its options and the run options mix."""
    slurm = sub.add_parser("slurm", help="print an sbatch script that runs a backend on N nodes")
    _add_slurm_options(slurm)
    slurm.add_argument("backend", help="see 'parbench list'")
    slurm.add_argument("run_args", nargs=argparse.REMAINDER, metavar="RUN_OPTION",
                       help="options of 'parbench run', passed on verbatim to every node")
    slurm.set_defaults(func=cmd_slurm, slurm_help=slurm.format_help)
    return slurm


def cmd_slurm(args: argparse.Namespace) -> int:
    """Print the sbatch script for ``parbench slurm BACKEND [options]``.

    Design: everything after BACKEND is one argparse REMAINDER, so the slurm options and the
    run options can come in any order (``parbench slurm torch-ddp --nodes 2 --steps 100``).
    A parser of the slurm options alone then takes its own out of that remainder
    (parse_known_args, no abbreviations) and leaves the run options as the user typed them, in
    order, so they reach ``parbench run`` verbatim; slurm options given before BACKEND count
    too, and after it they win. The run options are checked here with a throw-away parser
    built by the same ``add_run_options`` as ``parbench run`` (plus ``--devices``), without
    abbreviations, so a misspelt option fails now with exit 2 and not on the cluster later.
    """
    rest = list(args.run_args)
    if "-h" in rest or "--help" in rest:
        print(args.slurm_help(), end="")
        return 0
    split = _Parser(add_help=False, allow_abbrev=False)
    _add_slurm_options(split)
    given = argparse.Namespace(nodes=args.nodes, gpus_per_node=args.gpus_per_node,
                               master_port=args.master_port, time=args.time,
                               partition=args.partition, job_name=args.job_name)
    opts, run_args = split.parse_known_args(rest, namespace=given)
    if opts.nodes is None:
        raise UsageError("slurm: --nodes is required")
    if args.backend not in BACKENDS:
        raise UsageError(f"unknown backend {args.backend!r}; see 'parbench list'")
    script = sbatch_script(args.backend, run_args, opts.nodes, opts.gpus_per_node,
                           opts.master_port, opts.time, opts.partition, opts.job_name)
    check = _Parser(add_help=False, allow_abbrev=False)
    add_run_options(check, "run")
    OPTIONS["devices"].add_to(check)  # a flag of 'run' alone
    check.parse_args(run_args)
    print(script, end="")
    return 0
