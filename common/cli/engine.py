"""What the engine sub-commands share (``parbench slurm``, ``parbench k8s``): each prints a job
for a cluster's engine that runs ``parbench run BACKEND [run options]`` on every node, and takes
its own options and the run options mixed in any order.

Design: everything after BACKEND is one argparse REMAINDER. A parser of the engine's options
alone takes its own out of it (parse_known_args, no abbreviations) and leaves the run options as
the user typed them, in order, so they reach ``parbench run`` verbatim; the engine's options
given before BACKEND count too, and after it they win. The run options are then checked with a
throw-away parser built by the same ``add_run_options`` as ``parbench run`` (plus
``--devices``), without abbreviations, so a misspelt option fails here with exit 2 and not on
the cluster later.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import NoReturn

from parbench.base.errors import UsageError
from parbench.launch.options import OPTIONS
from parbench.run.registry import BACKENDS

from .parsing import OneLineParser
from .run_command import add_run_options


class _Parser(OneLineParser):
    """Its errors name the sub-command: the run options it checks are not the engine's own."""

    def __init__(self, command: str) -> None:
        super().__init__(add_help=False, allow_abbrev=False)
        self.command = command

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.command}: {message}")


def add_engine_parser(sub: argparse._SubParsersAction, command: str, summary: str,
                      add_own: Callable[[argparse.ArgumentParser], None],
                      run: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
    """The sub-command ``command``: its own options, the backend, then the run options in any
    order (the REMAINDER that split_options takes apart)."""
    parser = sub.add_parser(command, help=summary)
    add_own(parser)
    parser.add_argument("backend", help="see 'parbench list'")
    parser.add_argument("run_args", nargs=argparse.REMAINDER, metavar="RUN_OPTION",
                        help="options of 'parbench run', passed on verbatim to every node")
    parser.set_defaults(func=run, engine_help=parser.format_help)
    return parser


def split_options(args: argparse.Namespace, command: str,
                  add_own: Callable[[argparse.ArgumentParser], None]
                  ) -> tuple[argparse.Namespace, list[str]]:
    """(the engine's options, the run options as given) of ``args.run_args``; the backend is
    known and --nodes given, or UsageError."""
    split = _Parser(command)
    add_own(split)
    given = argparse.Namespace(**{action.dest: getattr(args, action.dest)
                                  for action in split._actions})
    opts, run_args = split.parse_known_args(list(args.run_args), namespace=given)
    if opts.nodes is None:
        raise UsageError(f"{command}: --nodes is required")
    if args.backend not in BACKENDS:
        raise UsageError(f"unknown backend {args.backend!r}; see 'parbench list'")
    return opts, run_args


def check_run_options(run_args: list[str], command: str) -> None:
    """UsageError naming the first run option that 'parbench run' would refuse."""
    check = _Parser(command)
    add_run_options(check, "run")
    OPTIONS["devices"].add_to(check)  # a flag of 'run' alone
    check.parse_args(run_args)


def printed_help(args: argparse.Namespace) -> bool:
    """--help after the backend is the sub-command's help (argparse's REMAINDER took it):
    print it, and say so."""
    if "-h" in args.run_args or "--help" in args.run_args:
        print(args.engine_help(), end="")
        return True
    return False
