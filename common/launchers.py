"""Command lines that start a run's process tree, one per launcher. Strings only: the
launchers themselves are the frameworks' own (torchrun, paddle.distributed.launch)."""

from __future__ import annotations

import importlib.util
import socket
import sys
from pathlib import Path

from .nodes import Nodes

LOCALHOST = "127.0.0.1"  # rendezvous servers bind every interface; we only ever address this


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOCALHOST, 0))
        return sock.getsockname()[1]


def command(launcher: str, job_path: Path, devices: int, nodes: Nodes | None = None
            ) -> list[str]:
    """argv that runs the job under ``launcher`` on this node, with ``devices`` of its own.

    ``python``: one process (single device, DataParallel, MirroredStrategy);
    ``spawn`` / ``tf-config``: one process that starts the workers itself (mp.spawn,
    paddle.distributed.spawn, or one TF_CONFIG process per worker);
    ``torchrun`` / ``paddle-launch``: the framework's launcher starts one worker per device;
    with ``nodes``, this node's part of a multi-node run, meeting the others at the master.
    """
    worker = [sys.executable, "-m", "parbench.worker", str(job_path)]
    if launcher in ("python", "spawn", "tf-config"):
        return worker
    if launcher == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={devices}",
                *_torchrun_rendezvous(nodes), "-m", "parbench.worker", str(job_path)]
    if launcher == "paddle-launch":
        script = importlib.util.find_spec("parbench.worker").origin
        # Unset: FLAGS_print_launcher_env makes the launcher print a failed worker's whole
        # environment (into the record's error tail), and PADDLE_LOG_DIR would override --log_dir.
        return ["env", "-u", "FLAGS_print_launcher_env", "-u", "PADDLE_LOG_DIR",
                sys.executable, "-m", "paddle.distributed.launch", f"--nproc_per_node={devices}",
                *_paddle_rendezvous(nodes), f"--log_dir={job_path.parent / 'launch-log'}",
                script, str(job_path)]
    raise ValueError(f"unknown launcher {launcher!r}")


def _torchrun_rendezvous(nodes: Nodes | None) -> list[str]:
    """One node: c10d on a free loopback port. Several: the static rendezvous, the one where
    --node-rank decides the global ranks (node n gets n x devices onwards; c10d numbers nodes
    in the order they join), its store on node 0 at the master."""
    if nodes is None:
        return ["--nnodes=1", "--rdzv-backend=c10d", f"--rdzv-endpoint={LOCALHOST}:{free_port()}",
                f"--local-addr={LOCALHOST}"]
    local = [f"--local-addr={LOCALHOST}"] if nodes.loopback else []
    return [f"--nnodes={nodes.nnodes}", f"--node-rank={nodes.node_rank}", "--rdzv-backend=static",
            f"--master-addr={nodes.master_host}", f"--master-port={nodes.master_port}", *local]


def _paddle_rendezvous(nodes: Nodes | None) -> list[str]:
    """--host: without it the launcher announces this node at the address its host name
    resolves to, which on most machines is not loopback (on a real cluster that address is the
    right one). --rank fixes the node's place (unset, nodes are numbered as they join)."""
    if nodes is None:
        return [f"--master={LOCALHOST}:{free_port()}", f"--host={LOCALHOST}"]
    host = [f"--host={LOCALHOST}"] if nodes.loopback else []
    return [f"--nnodes={nodes.nnodes}", f"--rank={nodes.node_rank}",
            f"--master={nodes.master_host}:{nodes.master_port}", *host]
