"""Command lines that start a run's process tree, one per launcher. Strings only: the
launchers themselves are the frameworks' own (torchrun, paddle.distributed.launch)."""

from __future__ import annotations

import importlib.util
import socket
import sys
from pathlib import Path

LOCALHOST = "127.0.0.1"  # rendezvous servers bind every interface; we only ever address this


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOCALHOST, 0))
        return sock.getsockname()[1]


def command(launcher: str, job_path: Path, world_size: int) -> list[str]:
    """argv that runs the job under ``launcher``.

    ``python``: one process (single device, DataParallel, MirroredStrategy);
    ``spawn`` / ``tf-config``: one process that starts the workers itself (mp.spawn,
    paddle.distributed.spawn, or one TF_CONFIG process per worker);
    ``torchrun`` / ``paddle-launch``: the framework's launcher starts one worker per device.
    """
    worker = [sys.executable, "-m", "parbench.worker", str(job_path)]
    if launcher in ("python", "spawn", "tf-config"):
        return worker
    if launcher == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", "--nnodes=1",
                f"--nproc-per-node={world_size}", "--rdzv-backend=c10d",
                f"--rdzv-endpoint={LOCALHOST}:{free_port()}", f"--local-addr={LOCALHOST}",
                "-m", "parbench.worker", str(job_path)]
    if launcher == "paddle-launch":
        script = importlib.util.find_spec("parbench.worker").origin
        # --host: without it the launcher hands workers the store at the address the hostname
        # resolves to, which on most machines is not loopback. Unset: FLAGS_print_launcher_env
        # makes the launcher print a failed worker's whole environment (into the record's error
        # tail), and PADDLE_LOG_DIR would override --log_dir.
        return ["env", "-u", "FLAGS_print_launcher_env", "-u", "PADDLE_LOG_DIR",
                sys.executable, "-m", "paddle.distributed.launch",
                f"--nproc_per_node={world_size}", f"--master={LOCALHOST}:{free_port()}",
                f"--host={LOCALHOST}", f"--log_dir={job_path.parent / 'launch-log'}", script,
                str(job_path)]
    raise ValueError(f"unknown launcher {launcher!r}")
