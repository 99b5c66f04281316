"""Multi-node runs under Slurm: where this node stands in the job, and the sbatch script.

A multi-node run is one ``parbench run`` per node, each told the number of nodes, its own rank
and the master's address. Under Slurm those come from the environment that ``srun`` gives each
task, so ``parbench run --from-slurm`` reads them here instead of asking the user to type them
per node; ``parbench slurm`` prints a script whose single ``srun`` line does exactly that.
Nothing here imports a framework, and every problem is a one-line UsageError (exit 2).
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

from parbench.base.errors import UsageError

DEFAULT_MASTER_PORT = 29500
SCONTROL_TIMEOUT_S = 30
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

    The nodelist is expanded by Slurm's own ``scontrol show hostnames`` (``node[01-04,07]`` is
    node01..node04 and node07); its first host is the master (the usual ``scontrol show
    hostnames | head -n1``). Every node reads the same variables, so all agree on the master
    without talking to each other.
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
    hosts = expand_nodelist(list_name, nodelist, environ)
    # Fewer hosts than nodes is fine: only the first is needed (every node meets node 0
    # there), and several "nodes" on one host is how a run is rehearsed on one machine.
    if len(hosts) > nnodes:
        raise UsageError(f"--from-slurm: {list_name}={nodelist!r} names {len(hosts)} hosts "
                         f"but {nnodes_name}={nnodes}")
    return SlurmNode(nnodes=nnodes, node_rank=node_rank, master_host=hosts[0], hosts=hosts)


def expand_nodelist(name: str, nodelist: str, environ: Mapping[str, str]) -> tuple[str, ...]:
    """The hosts of a Slurm nodelist, in order, each once, as ``scontrol show hostnames``
    (present wherever srun runs a job; it expands a list locally, without a controller) gives
    them. scontrol reports a list it cannot read on stderr with exit code 0, or passes a broken
    bracket through, so both count as failures here."""
    scontrol = shutil.which("scontrol", path=environ.get("PATH"))
    if scontrol is None:
        raise UsageError(f"--from-slurm: Slurm's scontrol is not on PATH; it expands {name} "
                         "(install Slurm's client, e.g. Debian's slurm-client)")
    try:
        done = subprocess.run([scontrol, "show", "hostnames", nodelist], capture_output=True,
                              text=True, timeout=SCONTROL_TIMEOUT_S, env=dict(environ))
    except (OSError, subprocess.SubprocessError) as err:
        raise UsageError(f"--from-slurm: scontrol show hostnames failed: {err}") from None
    hosts = tuple(dict.fromkeys(done.stdout.split()))  # repeated names are dropped
    said = " ".join(done.stderr.split())
    if done.returncode or said or not hosts or any(c in h for h in hosts for c in "[]"):
        why = said or f"it gave {' '.join(hosts) or 'no host'}"
        raise UsageError(f"--from-slurm: {name}={nodelist!r} cannot be expanded by scontrol "
                         f"show hostnames: {why}")
    return hosts


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
    if not 1 <= master_port <= 65534:  # the check-in listens on PORT+1 (parbench.launch.nodes)
        raise UsageError(f"--master-port wants a port in 1..65534 (parbench also uses PORT+1); "
                         f"got {master_port}")
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


