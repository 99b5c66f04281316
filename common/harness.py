"""Runs one configuration: prepares the shared inputs once, launches each repeat as its own
process tree under the backend's launcher, supervises it (timeout, crash, progress) and turns
what the workers wrote into a record."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from functools import partial
from pathlib import Path

from tqdm import tqdm

from .batches import steps_per_epoch
from .config import Plan, RunConfig, UsageError, optimizer_settings, resolve
from .data import Dataset, DatasetError, load_dataset
from .envinfo import machine_env
from .exits import first_failure, how, write_exit
from .job import Job
from .launchers import command
from .lifetime import ProcessTree, die_with_parent, private_tempdir
from .load import LoadSample, load_env
from .loop import RankLog
from .netns import enter_private_network
from .profiling import attach, window
from .results import SCHEMA_VERSION, aggregate, name_of, run_variant, warmup_steps
from .samples import input_metrics
from .spec import ModelSpec, build_spec, sha256_of, spec_dict
from .weights import initial_weights, save_weights

ERROR_TAIL_CHARS = 4000
POLL_S = 0.2


@dataclass
class Prepared:
    """A checked configuration with its inputs on disk, shared by all its repeats."""

    cfg: RunConfig
    plan: Plan
    dataset: Dataset
    spec: ModelSpec
    spec_sha256: str
    shared: Path  # holds data/ and weights.npz


def spec_hash(spec: ModelSpec, dataset: Dataset, plan: Plan, cfg: RunConfig) -> str:
    """What makes two runs comparable: model, data, and the training configuration the user
    fixed -- not the backend, device count or threads, which are what a comparison varies.
    With --per-device-batch the user fixed the batch per device (weak scaling), so that, the
    epochs and the lr rule are hashed instead of the global batch, steps and scaled lr."""
    optimizer = plan.optimizer.as_dict()
    if plan.batch_mode == "per-device":
        optimizer["lr"] = optimizer_settings(cfg)["lr"]
        training = {"per_device_batch": plan.per_device_batch, "epochs": cfg.epochs,
                    "steps": cfg.steps, "lr_scaling": cfg.lr_scaling}
    else:
        training = {"global_batch": plan.global_batch, "steps": plan.total_steps}
    return sha256_of({"model": spec_dict(spec), "data": dataset.fingerprint(),
                      "training": {**training, "batch_mode": plan.batch_mode,
                                   "optimizer": optimizer, "seed": cfg.seed}})


def prepare(cfg: RunConfig, shared: Path) -> Prepared:
    """Check ``cfg`` (UsageError on bad input) and write data and weights into ``shared``."""
    resolve(cfg)  # cheap checks first: no dataset is loaded for a bad backend name
    try:
        dataset = load_dataset(cfg.dataset, Path(cfg.data_dir) if cfg.data_dir else None)
    except DatasetError as err:
        raise UsageError(str(err)) from None
    if cfg.train_subset is not None:
        dataset = _train_subset(dataset, cfg.train_subset)
    plan = resolve(cfg, len(dataset.y_train))
    try:  # e.g. a vit patch that does not divide the dataset's images
        spec = build_spec(cfg.model, dataset.input_shape, dataset.num_classes)
    except ValueError as err:
        raise UsageError(str(err)) from None
    (shared / "data").mkdir(parents=True, exist_ok=True)
    dataset.save(shared / "data")
    save_weights(shared / "weights.npz", initial_weights(spec, cfg.seed))
    return Prepared(cfg, plan, dataset, spec, spec_hash(spec, dataset, plan, cfg), shared)


def _train_subset(dataset: Dataset, rows: int) -> Dataset:
    """The first ``rows`` training samples (the test set unchanged)."""
    if rows > len(dataset.y_train):
        raise UsageError(f"--train-subset {rows} exceeds the {len(dataset.y_train)} training "
                         f"samples of {dataset.name}")
    return replace(dataset, x_train=dataset.x_train[:rows], y_train=dataset.y_train[:rows])


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
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # local runs: collectives stay on loopback
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


def _supervise(cmd: list[str], prepared: Prepared, workdir: Path) -> tuple[str, int | None]:
    """Run ``cmd`` to completion or timeout, with a progress bar; ('ok'|'failed'|'timeout', rc).
    However it ends (an exception included: Ctrl-C, SIGTERM), no process of the run survives."""
    total = prepared.plan.total_steps
    bar = tqdm(total=total, desc=prepared.cfg.backend, unit="step", leave=False,
               disable=not sys.stderr.isatty())
    deadline = time.monotonic() + prepared.cfg.timeout
    setup = partial(_launcher_setup, os.getpid(), prepared.plan.isolate_network)
    with open(workdir / "output.log", "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=workdir, start_new_session=True,
                                env=worker_env(prepared.plan, prepared.cfg.verbose),
                                preexec_fn=setup)
    tree = ProcessTree(proc.pid)
    try:
        while proc.poll() is None:
            if time.monotonic() > deadline:
                return "timeout", None
            tree.refresh()
            _show_progress(bar, workdir / "progress.json")
            time.sleep(POLL_S)
        if prepared.plan.launcher == "python":  # the worker is our child: we saw how it ended
            write_exit(workdir, 0, proc.pid, proc.returncode)
        return ("ok" if proc.returncode == 0 else "failed"), proc.returncode
    finally:
        tree.kill()
        proc.wait()
        bar.close()


def _show_progress(bar: tqdm, path: Path) -> None:
    try:
        progress = json.loads(path.read_text())
    except (OSError, ValueError):
        return  # not written yet, or being replaced right now
    bar.total = progress["total"]  # a native loader's epochs may differ from the contract's
    bar.update(progress["done"] - bar.n)


def _failure(status: str, code: int | None, prepared: Prepared, workdir: Path) -> str:
    """The error of a failed or timed-out run: what happened first (the timeout, or which
    rank died first and how), then the first worker traceback and the logs' tails."""
    lines = [f"timed out after {prepared.cfg.timeout:g} s"] if status == "timeout" else []
    first = first_failure(workdir)
    if first:
        lines.append(first)
    elif status != "timeout":
        launcher = prepared.plan.launcher
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


def _rank_logs(workdir: Path, count: int) -> list[RankLog] | None:
    paths = [workdir / f"rank{r}.json" for r in range(count)]
    if not all(p.is_file() for p in paths):
        return None
    return [RankLog(**json.loads(p.read_text())) for p in paths]


def _job(prepared: Prepared, workdir: Path, save_weights_to: Path | None) -> Job:
    plan, cfg = prepared.plan, prepared.cfg
    return Job(backend=cfg.backend, launcher=plan.launcher, world_size=plan.world_size,
               threads=plan.threads, model=spec_dict(prepared.spec), dataset=cfg.dataset,
               num_classes=prepared.dataset.num_classes, global_batch=plan.global_batch,
               total_steps=plan.total_steps, optimizer=asdict(plan.optimizer), seed=cfg.seed,
               workdir=str(workdir), shared=str(prepared.shared),
               save_weights=save_weights_to is not None, verbose=cfg.verbose,
               profile_steps=_profile_steps(prepared), modes=plan.modes.as_dict(),
               epochs=plan.epochs)


def _profile_steps(prepared: Prepared) -> list[int] | None:
    """--profile's window: the record's own warm-up rule decides where steady steps begin."""
    plan = prepared.plan
    if not plan.profile:
        return None
    per_epoch = steps_per_epoch(len(prepared.dataset.y_train), plan.global_batch)
    return window(plan.total_steps, warmup_steps(plan.total_steps), per_epoch)


def run_once(prepared: Prepared, repeat: int, save_weights_to: Path | None = None) -> dict:
    """One repeat in its own process tree; always returns a record, ok or not."""
    plan = prepared.plan
    processes = 1 if plan.backend.one_process else plan.world_size
    with private_tempdir("parbench-run-") as tmp:
        workdir = Path(tmp)
        job_path = _job(prepared, workdir, save_weights_to).save()
        before = LoadSample.now()
        launch = time.time()
        status, code = _supervise(command(plan.launcher, job_path, plan.world_size),
                                  prepared, workdir)
        load = load_env(before, LoadSample.now())  # every process of the run is reaped now
        duration = time.time() - launch
        logs = _rank_logs(workdir, processes) if status == "ok" else None
        error, fed = None, None
        if logs is None:
            error = _failure(status, code, prepared, workdir)
            status = "timeout" if status == "timeout" else "failed"
        else:
            fed = input_metrics(workdir, logs, plan.modes.input, prepared.cfg.seed,
                                plan.global_batch, len(prepared.dataset.y_train))
            if save_weights_to is not None:
                shutil.copyfile(workdir / "final_weights.npz", save_weights_to)
    record = _record(prepared, repeat, status, error, logs, launch, duration, load)
    if fed is not None:
        record["metrics"]["input"] = fed
    if logs and plan.profile:  # the ranks' figures become the profile document and summary
        attach(record, name_of(record), [(log.rank, log.profile) for log in logs])
    return record


def _record(prepared: Prepared, repeat: int, status: str, error: str | None,
            logs: list[RankLog] | None, launch: float, duration: float, load: dict) -> dict:
    cfg, plan = prepared.cfg, prepared.plan
    described = logs[0].describe if logs else {}
    framework_env = {"framework": plan.backend.framework,
                     "framework_version": described.get("framework_version"),
                     "device_names": [name for log in logs or []
                                      for name in log.describe.get("device_names", [])],
                     # the machine's GPU behind each device of each rank (empty on CPU)
                     "gpus": [gpu for log in logs or [] for gpu in log.describe.get("gpus", [])],
                     "cuda_version": described.get("cuda_version"),
                     "nccl_version": described.get("nccl_version")}
    extra = {k: v for k, v in described.items() if k not in framework_env and k != "notes"}
    metrics = aggregate(logs, plan.global_batch, launch, cfg.target_accuracy) if logs else None
    return {
        "schema_version": SCHEMA_VERSION, "run_id": uuid.uuid4().hex,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "backend": cfg.backend, "framework": plan.backend.framework,
        "strategy": plan.backend.strategy, "launcher": plan.launcher,
        "world_size": plan.world_size, "status": status, "error": error, "seed": cfg.seed,
        "repeat": repeat, "global_batch": plan.global_batch,
        "per_device_batch": plan.per_device_batch, "batch_mode": plan.batch_mode,
        "lr": plan.optimizer.lr, "lr_scaling": cfg.lr_scaling,
        "steps": len(logs[0].step_s) if logs else plan.total_steps,
        "optimizer": plan.optimizer.as_dict(), "dataset": cfg.dataset,
        "model": cfg.model, "spec_sha256": prepared.spec_sha256, "config": asdict(cfg),
        "variant": run_variant(plan), "modes": plan.modes.as_dict(), "metrics": metrics,
        "env": {**machine_env(plan.threads), **framework_env, **extra,
                "network_isolated": plan.isolate_network, "allocator": allocator_env(), **load},
        "duration_s": duration, "notes": described.get("notes", []),
    }
