"""Multi-node runs under Slurm: where this node stands in the job, and the sbatch script.

A multi-node run is one ``parbench run`` per node, each told the number of nodes, its own rank
and the master's address. Under Slurm those come from the environment that ``srun`` gives each
task, so ``parbench run --from-slurm`` reads them here instead of asking the user to type them
per node; ``parbench slurm`` prints a script whose single ``srun`` line does exactly that.
Nothing here imports a framework, and every problem is a one-line UsageError (exit 2).
"""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import NoReturn

import hostlist

from .registry import BACKENDS
from .config import UsageError

DEFAULT_MASTER_PORT = 29500
# What the script sets on the srun line; the same option among the run options would clash.
SET_BY_SCRIPT = ("--nnodes", "--node-rank", "--master", "--from-slurm", "--master-port")
_UNDER_SRUN = "run it under srun, one task per node"


@dataclass(frozen=True)
class SlurmNode:
    nnodes: int
    node_rank: int
    master_host: str  # the first host of the nodelist: node 0, where the record is written
    hosts: tuple[str, ...]  # the job's nodes in Slurm's order; hosts[node_rank] is this one


def _first_set(environ: Mapping[str, str], *names: str) -> tuple[str, str]:
    """(name, value) of the first of these variables that is set and not empty: Slurm sets
    some values under two names, and which of them depends on its version and the context."""
    for name in names:
        if environ.get(name, "").strip():
            return name, environ[name].strip()
    alias = f" (nor {', '.join(names[1:])})" if len(names) > 1 else ""
    raise UsageError(f"--from-slurm: {names[0]} is not set{alias}: {_UNDER_SRUN}")


def _count(name: str, value: str) -> int:
    # Digits only: int() would also take "+1", "1_0" and other scripts' digits.
    if not re.fullmatch(r"[0-9]+", value):
        raise UsageError(f"--from-slurm: {name}={value!r} is not a non-negative integer")
    return int(value)


def slurm_node(environ: Mapping[str, str]) -> SlurmNode:
    """This node's place in the job, from the variables srun sets for each task.

    The nodelist is expanded the way ``scontrol show hostnames`` does (``node[01-04,07]`` is
    node01..node04 and node07), by python-hostlist rather than a parser of our own; its first
    host is the master (the usual ``scontrol show hostnames | head -n1``). Every node reads
    the same variables, so all agree on the master without talking to each other.
    """
    nnodes_name, nnodes_text = _first_set(environ, "SLURM_NNODES", "SLURM_JOB_NUM_NODES")
    nnodes = _count(nnodes_name, nnodes_text)
    if nnodes < 1:
        raise UsageError(f"--from-slurm: {nnodes_name}={nnodes} must be at least 1")
    rank_name, rank_text = _first_set(environ, "SLURM_NODEID")
    node_rank = _count(rank_name, rank_text)
    if node_rank >= nnodes:
        raise UsageError(f"--from-slurm: {rank_name}={node_rank} is out of range for "
                         f"{nnodes_name}={nnodes} (0..{nnodes - 1})")
    # Two tasks on one node would both claim this node's rank and start its workers twice.
    local = environ.get("SLURM_LOCALID", "").strip()
    if local and local != "0":
        raise UsageError(f"--from-slurm: SLURM_LOCALID={local}: more than one task on this "
                         f"node; {_UNDER_SRUN} (srun --ntasks-per-node=1)")
    list_name, nodelist = _first_set(environ, "SLURM_JOB_NODELIST", "SLURM_NODELIST")
    try:
        hosts = tuple(hostlist.expand_hostlist(nodelist))  # repeated names are dropped
    except hostlist.BadHostlist as err:
        problem = f"--from-slurm: {list_name}={nodelist!r} cannot be parsed: {err}"
        raise UsageError(problem) from None
    # Fewer hosts than nodes is fine: only the first is needed (every node meets node 0
    # there), and several "nodes" on one host is how a run is rehearsed on one machine.
    if len(hosts) > nnodes:
        raise UsageError(f"--from-slurm: {list_name}={nodelist!r} names {len(hosts)} hosts "
                         f"but {nnodes_name}={nnodes}")
    return SlurmNode(nnodes=nnodes, node_rank=node_rank, master_host=hosts[0], hosts=hosts)


def _given(run_args: list[str], option: str) -> bool:
    return any(arg == option or arg.startswith(option + "=") for arg in run_args)


def _directive(option: str, value: str) -> str:
    # sbatch reads #SBATCH lines itself, not through bash: a value with white space or quotes
    # would be split or mangled there, and a newline would start a command of its own.
    if not value or any(c.isspace() or c in "'\"\\" for c in value):
        raise UsageError(f"{option} {value!r}: wants a value without spaces, quotes or "
                         "backslashes")
    return f"#SBATCH {option}={value}"


def sbatch_script(backend: str, run_args: list[str], nodes: int, gpus_per_node: int,
                  master_port: int, time_limit: str | None = None,
                  partition: str | None = None, job_name: str | None = None) -> str:
    """A bash script for sbatch that runs ``parbench run BACKEND`` once on each of ``nodes``.

    One Slurm task per node, not per device: parbench's own launcher (torchrun, spawn,
    paddle.distributed.launch, one process per TF worker) starts the node's workers, exactly as
    on one machine, and ``--from-slurm`` gives it the node count, rank and master. With GPUs,
    ``--devices`` is the number of GPUs per node, so it cannot also be among ``run_args``;
    without, the ``--devices`` in ``run_args`` (or parbench's default) applies on each node.
    """
    if nodes < 1:
        raise UsageError(f"--nodes wants 1 or more; got {nodes}")
    if gpus_per_node < 0:
        raise UsageError(f"--gpus-per-node wants 0 or more; got {gpus_per_node}")
    if not 1 <= master_port <= 65535:
        raise UsageError(f"--master-port wants a port in 1..65535; got {master_port}")
    clash = [option for option in SET_BY_SCRIPT if _given(run_args, option)]
    if clash:
        raise UsageError(f"{clash[0]}: the script sets it from Slurm's environment; leave it "
                         "out of the run options")
    if gpus_per_node > 0 and _given(run_args, "--devices"):
        raise UsageError(f"--devices: with --gpus-per-node {gpus_per_node} each node trains on "
                         "its GPUs; leave --devices out")
    directives = [_directive("--job-name", job_name or f"parbench-{backend}"),
                  f"#SBATCH --nodes={nodes}", "#SBATCH --ntasks-per-node=1"]
    if gpus_per_node > 0:
        directives.append(f"#SBATCH --gpus-per-node={gpus_per_node}")
    if time_limit is not None:
        directives.append(_directive("--time", time_limit))
    if partition is not None:
        directives.append(_directive("--partition", partition))
    directives.append("#SBATCH --output=parbench-%j.out")
    devices = ["--devices", str(gpus_per_node)] if gpus_per_node > 0 else []
    srun = ["srun", "--ntasks-per-node=1", "--kill-on-bad-exit=1", "parbench", "run", backend,
            "--from-slurm", "--master-port", str(master_port), *devices, *run_args]
    return "\n".join([
        "#!/bin/bash",
        "# parbench on Slurm: one task per node; on each, `parbench run --from-slurm` reads",
        "# the node count, its rank and the master (the first host of the nodelist) from",
        "# srun's environment, and the backend's own launcher starts that node's workers.",
        *directives,
        "set -euo pipefail",
        "# Node 0 writes the record into --out (relative paths start in the folder sbatch was",
        "# called from); the other nodes print their part into the --output file above.",
        "# parbench must be on PATH on every node: activate its environment here if needed.",
        "# --kill-on-bad-exit ends every node when one fails, instead of leaving them waiting.",
        shlex.join(srun),
        "",
    ])


class _Parser(argparse.ArgumentParser):
    """Errors become UsageErrors: one line and exit 2 through parbench's main."""

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


def add_slurm_parser(sub: argparse._SubParsersAction,
                     add_run_options: Callable[[argparse.ArgumentParser], None]
                     ) -> argparse.ArgumentParser:
    """The ``slurm`` sub-command; see cmd_slurm for how its options and the run options mix."""
    slurm = sub.add_parser("slurm", help="print an sbatch script that runs a backend on N nodes")
    _add_slurm_options(slurm)
    slurm.add_argument("backend", help="see 'parbench list'")
    slurm.add_argument("run_args", nargs=argparse.REMAINDER, metavar="RUN_OPTION",
                       help="options of 'parbench run', passed on verbatim to every node")
    slurm.set_defaults(func=cmd_slurm, slurm_run_options=add_run_options,
                       slurm_help=slurm.format_help)
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
    args.slurm_run_options(check)
    try:
        check.add_argument("--devices", type=int)  # an option of 'run' itself, not of the table
    except argparse.ArgumentError:
        pass  # add_run_options already has it
    check.parse_args(run_args)
    print(script, end="")
    return 0
