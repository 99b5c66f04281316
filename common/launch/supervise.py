"""One process tree of a run, from start to end: the workers' environment, the launcher started
under the harness's watch (timeout, progress, another node's failure), every process ended
however the run ends, and the error of a run that failed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import nullcontext
from functools import partial
from pathlib import Path

from tqdm import tqdm

from parbench.base.files import write_atomic
from parbench.run.job import STOP_FILE
from parbench.run.process import die_with_parent, how, write_exit

from .config import Plan, RunConfig
from .exits import first_failure
from .lifetime import ProcessTree, raise_if_stopping, raise_stop, stop_signal, stops_deferred
from .netns import enter_private_network
from .nodes import interface_env
from .nodewatch import Link

ERROR_TAIL_CHARS = 4000
POLL_S = 0.2
GRACE_S = 60.0  # a stopped checkpointing run's time to write its last checkpoint and end


# Variables the launchers set themselves; one inherited from the user's shell would silently
# override our command line (Paddle's launcher reads PADDLE_* and MASTER_* before its flags).
LAUNCHER_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE",
                      "TF_CONFIG")
LAUNCHER_PREFIXES = ("PADDLE_", "TORCHELASTIC_")


# A worker is a fresh process whose data is memory-mapped from files, so glibc malloc starts
# with its smallest dynamic mmap and trim thresholds, and a step's activations (8 MiB tensors
# here) were mapped and unmapped again every step: 8,500 minor page faults per torch step
# against 390 for a bare loop that built its data in process (measured with /usr/bin/time,
# 20 vs 80 steps), and +5-8% step time. Fixed thresholds give every worker the warm heap a
# training script has (PyTorch's CPU tuning guide recommends a memory-reusing allocator for
# the same reason).
MALLOC_SETTINGS = {"MALLOC_MMAP_THRESHOLD_": str(64 << 20),
                   "MALLOC_TRIM_THRESHOLD_": str(256 << 20)}


def worker_env(plan: Plan, verbose: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in LAUNCHER_VARIABLES and not k.startswith(LAUNCHER_PREFIXES)}
    # TensorFlow reads its C++ log level once, at import, before a worker has read its job.
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "0" if verbose else "2")
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[name] = str(plan.threads)  # torchrun would otherwise force 1, mp.spawn leave all
    for name, value in interface_env(plan.nodes).items():
        if plan.nodes:  # --ifname, or lo for a loopback master
            env[name] = value
        else:  # local runs: collectives stay on loopback unless the user says otherwise
            env.setdefault(name, value)
    env["PYTHONUNBUFFERED"] = "1"
    for name, value in MALLOC_SETTINGS.items():
        env.setdefault(name, value)  # a user's own setting wins (and is recorded)
    return env


def allocator_env() -> dict[str, str]:
    """The glibc malloc settings the workers run with, for the record."""
    return {name: os.environ.get(name, value) for name, value in MALLOC_SETTINGS.items()}


def _launcher_setup(harness_pid: int, isolated: bool) -> None:
    """Runs in the launcher's process between fork and exec."""
    die_with_parent(harness_pid)
    if isolated:
        enter_private_network()


def supervise(cmd: list[str], plan: Plan, cfg: RunConfig, workdir: Path, link: Link | None
              ) -> tuple[str, int | None]:
    """Run ``cmd`` to completion or timeout, with a progress bar; ('ok'|'failed'|'timeout', rc).
    A multi-node run also ends when ``link`` says another node failed (link.problem says how).
    A stop signal (Ctrl-C, SIGTERM) to a checkpointing run asks its workers to write a last
    checkpoint and end (see Preemption); however the run ends (an exception included), no
    process of it survives."""
    total = plan.total_steps
    bar = tqdm(total=total, desc=cfg.backend, unit="step", leave=False,
               disable=not sys.stderr.isatty())
    deadline = time.monotonic() + cfg.timeout
    setup = partial(_launcher_setup, os.getpid(), plan.isolate_network)
    with open(workdir / "output.log", "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=workdir, start_new_session=True,
                                env=worker_env(plan, cfg.verbose),
                                preexec_fn=setup)
    tree = ProcessTree(proc.pid)
    preemption = Preemption(workdir) if plan.checkpoint_every else None
    try:
        with stops_deferred() if preemption else nullcontext():
            while proc.poll() is None:
                if preemption:
                    preemption.check()
                else:
                    raise_if_stopping()
                if time.monotonic() > deadline:
                    return "timeout", None
                tree.refresh()
                _show_progress(bar, workdir / "progress.json")
                if link and link.watch(bar.n):
                    return "failed", None
                time.sleep(POLL_S)
        if plan.launcher == "python":  # the worker is our child: we saw how it ended
            write_exit(workdir, 0, proc.pid, proc.returncode)
        return ("ok" if proc.returncode == 0 else "failed"), proc.returncode
    finally:
        tree.kill()
        proc.wait()
        bar.close()


class Preemption:
    """A stop signal to a run that writes checkpoints: the harness asks the workers to stop
    (the job's STOP_FILE); they agree on a step, write a checkpoint after it and end as usual,
    their logs saying where they stopped (RankLog.preempted_step), and the record's status is
    ``preempted``. A run that has not ended GRACE_S after the signal is stopped like any other."""

    def __init__(self, workdir: Path):
        self.workdir, self.deadline = workdir, None

    def check(self) -> None:
        if stop_signal() is None:
            return
        if self.deadline is None:
            write_atomic(self.workdir / STOP_FILE, str(stop_signal()).encode())
            self.deadline = time.monotonic() + GRACE_S
        elif time.monotonic() > self.deadline:
            raise_stop()


def _show_progress(bar: tqdm, path: Path) -> None:
    try:
        progress = json.loads(path.read_text())
    except (OSError, ValueError):
        return  # not written yet, or being replaced right now
    bar.total = progress["total"]  # a native loader's epochs may differ from the contract's
    bar.update(progress["done"] - bar.n)


def failure(status: str, code: int | None, plan: Plan, cfg: RunConfig, workdir: Path,
            link: Link | None) -> str:
    """The error of a failed or timed-out run: what happened first (the timeout, another
    node's failure, or which rank died first and how), then the first worker traceback and
    the logs' tails."""
    lines = [f"timed out after {cfg.timeout:g} s"] if status == "timeout" else []
    if link and link.problem:
        lines.append(link.problem)
    first = first_failure(workdir)
    if first:
        lines.append(first)
    elif status != "timeout" and not lines:
        launcher = plan.launcher
        lines.append(f"the launcher ({launcher}) ended with {how(code)} and no rank reported "
                     "a failure" if code else "a worker wrote no results")
    return "\n".join([*lines, _error_tail(workdir)])


def _error_tail(workdir: Path) -> str:
    """The first worker traceback (the cause), then the end of each worker log, then the end
    of the launcher's own output (which says which rank died and how)."""
    errors = sorted((workdir / "errors").glob("*.txt"))
    parts = [errors[0].read_text(errors="replace")[-ERROR_TAIL_CHARS:]] if errors else []
    for log in [*sorted((workdir / "launch-log").glob("workerlog.*")), workdir / "output.log"]:
        text = log.read_text(errors="replace").strip() if log.is_file() else ""
        if text:
            parts.append(f"--- {log.name} ---\n{text[-ERROR_TAIL_CHARS // 2:]}")
    return "\n".join(parts) or "(the workers printed nothing)"
