"""``parbench slurm BACKEND --nodes N [run options]``: print the sbatch script that runs one
``parbench run --from-slurm`` per node (the script itself: parbench.launch.slurm; how the slurm
options and the run options mix: parbench.cli.engine)."""

from __future__ import annotations

import argparse

from parbench.launch.slurm import DEFAULT_MASTER_PORT, sbatch_script

from .engine import add_engine_parser, check_run_options, printed_help, split_options


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
    return add_engine_parser(sub, "slurm", "print an sbatch script that runs a backend on N "
                             "nodes", _add_slurm_options, cmd_slurm)


def cmd_slurm(args: argparse.Namespace) -> int:
    """Print the sbatch script for ``parbench slurm BACKEND [options]``."""
    if printed_help(args):
        return 0
    opts, run_args = split_options(args, "slurm", _add_slurm_options)
    script = sbatch_script(args.backend, run_args, opts.nodes, opts.gpus_per_node,
                           opts.master_port, opts.time, opts.partition, opts.job_name)
    check_run_options(run_args, "slurm")
    print(script, end="")
    return 0
