"""The harness's side of checkpoints (the format and the loop's side: parbench.run.checkpoint):
the options' rules, checked before anything is loaded; the checkpoint a run resumes from,
found and checked against the run before it launches; what the Job and the record say."""

from __future__ import annotations

import json
import signal
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from parbench.base.errors import CheckpointError, Unavailable, UsageError
from parbench.contract.spec import ModelSpec, parameters
from parbench.run.checkpoint import (
    MANIFEST,
    STATE,
    STEP_PREFIX,
    Checkpoints,
    latest,
    read,
    step_folder,
)
from parbench.run.portable import PORTABLE, check_state
from parbench.run.registry import BACKENDS, Backend

from .lifetime import stop_signal

# Options a resumed run may set otherwise than the run that wrote its checkpoint: where and how
# it runs, not what it trains (that is the configuration's hash, which must be equal).
FREE = {"backend", "devices", "launcher", "threads", "timeout", "out", "verbose",
        "isolate_network", "repeats", "checkpoint_every", "checkpoint_dir", "resume_from",
        "nnodes", "node_rank", "master", "ifname", "join_timeout", "input"}


def check_options(cfg, backend: Backend) -> None:
    """The rules of --checkpoint-every, --checkpoint-dir and --resume-from that need no file:
    UsageError (Unavailable where the backend writes no checkpoints)."""
    asked = [flag for flag, value in (("--checkpoint-every", cfg.checkpoint_every),
                                      ("--resume-from", cfg.resume_from)) if value is not None]
    if (cfg.checkpoint_every is None) != (cfg.checkpoint_dir is None):
        raise UsageError("--checkpoint-every N and --checkpoint-dir DIR go together: every N "
                         "steps a checkpoint is written to DIR/step-N")
    if not asked:
        return
    if backend.checkpoint is None:
        raise Unavailable(f"{asked[0]}: {backend.name} writes no checkpoints yet (the backends "
                          f"that do: {', '.join(_checkpointing())})")
    if cfg.repeats > 1:
        raise UsageError(f"{asked[0]} with --repeats {cfg.repeats}: the repeats would write "
                         "and resume the same checkpoints; run one repeat")
    if cfg.profile:
        raise UsageError(f"{asked[0]} with --profile: the profiled window is of a whole run")


def _checkpointing() -> list[str]:
    return [name for name, backend in BACKENDS.items() if backend.checkpoint]


@dataclass(frozen=True)
class Resume:
    """The checkpoint a run resumes from, checked."""

    folder: str  # the step's folder
    step: int
    run_id: str  # the run that wrote it
    backend: str
    world_size: int

    def record(self) -> dict:
        return asdict(self)


def resume_point(cfg, plan, spec: ModelSpec, spec_sha256: str) -> Resume | None:
    """The checkpoint --resume-from names (a step's folder, or the latest in a folder), its
    files checked against their checksums and its run against this one (the framework, the
    model's tensors, then the configuration); UsageError says what does not fit, in one
    line. A portable checkpoint (parbench convert's) fits every framework."""
    if cfg.resume_from is None:
        return None
    try:
        folder = latest(Path(cfg.resume_from))
        manifest = read(folder)
    except CheckpointError as err:
        raise UsageError(str(err)) from None
    backend = plan.backend
    if manifest["framework"] not in (backend.framework, PORTABLE):
        raise UsageError(f"--resume-from {folder}: written by {manifest['backend']} "
                         f"({manifest['api']}); a {backend.framework} backend cannot read it "
                         f"('parbench convert {folder} --out DIR' makes a portable one that "
                         "every backend reads)")
    other_tensor = _first_other_tensor(manifest["tensors"], tensors_of(spec))
    if other_tensor:
        raise UsageError(f"--resume-from {folder}: written for another model: {other_tensor}")
    if manifest["spec_sha256"] != spec_sha256:
        raise UsageError(f"--resume-from {folder}: written by a run of another configuration "
                         f"({_differences(manifest['config'], cfg.as_dict())}); resume it with "
                         "the model, data, batch, steps, optimizer and seed it was written with")
    if manifest["step"] >= plan.total_steps:
        raise UsageError(f"--resume-from {folder}: its step {manifest['step']} is the end of "
                         f"the run's {plan.total_steps} steps; there is nothing left to train")
    if manifest["framework"] == PORTABLE:
        _check_portable(folder, manifest, spec, plan.optimizer.name)
    return Resume(str(folder.resolve()), manifest["step"], manifest["run_id"],
                  manifest["backend"], manifest["world_size"])


def _check_portable(folder: Path, manifest: dict, spec: ModelSpec, optimizer: str) -> None:
    """A portable checkpoint's files hold this model's tensors and the rule's slots."""
    trainable = [name for name, param in parameters(spec).items() if param.trainable]
    try:
        check_state(folder / STATE, tensors_of(spec), trainable, optimizer, manifest["step"])
    except CheckpointError as err:
        raise UsageError(f"--resume-from {err}") from None


def tensors_of(spec: ModelSpec) -> dict[str, list[int]]:
    """The model's canonical tensors and their shapes, as a checkpoint's manifest keeps them."""
    return {name: list(param.shape) for name, param in parameters(spec).items()}


def _first_other_tensor(written: dict[str, list[int]], now: dict[str, list[int]]) -> str | None:
    """The first tensor, in the model's order, whose name or shape differs; None if none."""
    pairs = zip(written.items(), now.items())
    for index, ((name, shape), (other, other_shape)) in enumerate(pairs):
        if name != other:
            return f"its tensor {index} is {name} {shape}, this model's is {other} {other_shape}"
        if shape != other_shape:
            return f"its {name} is {shape}, this model's is {other_shape}"
    if len(written) != len(now):
        return f"it has {len(written)} tensors, this model {len(now)}"
    return None


def _differences(written: dict, now: dict) -> str:
    keys = sorted(k for k in set(written) | set(now)
                  if k not in FREE and written.get(k) != now.get(k))
    if not keys:
        return "the same options, other data"
    return "; ".join(f"{k} {written.get(k)!r} there, {now.get(k)!r} here" for k in keys)


def job_checkpoints(cfg, backend: Backend, resume: Resume | None, run_id: str,
                    spec: ModelSpec, spec_sha256: str) -> dict | None:
    """The Job's ``checkpoints``: None when the run neither writes nor resumes one."""
    if cfg.checkpoint_every is None and resume is None:
        return None
    directory = None if cfg.checkpoint_dir is None else str(Path(cfg.checkpoint_dir).resolve())
    return asdict(Checkpoints(every=cfg.checkpoint_every, directory=directory,
                              resume_from=resume.folder if resume else None,
                              framework=backend.framework, api=backend.checkpoint,
                              run_id=run_id, spec_sha256=spec_sha256, config=cfg.as_dict(),
                              tensors=tensors_of(spec)))


def check_checkpoint_dir(cfg, spec_sha256: str) -> None:
    """--checkpoint-dir can be written, and holds no other configuration's checkpoints (its
    step-N folders would be replaced by this run's, or mixed with them)."""
    if cfg.checkpoint_dir is None:
        return
    directory = Path(cfg.checkpoint_dir)
    if directory.exists() and not directory.is_dir():
        raise UsageError(f"--checkpoint-dir {directory}: not a folder")
    for manifest in sorted(directory.glob(f"{STEP_PREFIX}*/{MANIFEST}")):
        try:
            other = json.loads(manifest.read_text()).get("spec_sha256")
        except (OSError, ValueError):
            other = None
        if other != spec_sha256:
            raise UsageError(f"--checkpoint-dir {directory}: {manifest.parent.name} is another "
                             "configuration's checkpoint; give a folder of its own")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=directory, prefix=".parbench-probe-")
        probe.close()
    except OSError as err:
        raise UsageError(f"--checkpoint-dir {directory}: cannot write there "
                         f"({err.strerror or err})") from None


def record_fields(plan, logs: list | None, directory: str | None) -> dict:
    """The record's ``checkpoints`` (where, how often, each one written: its step and the
    seconds rank 0 spent on it) and ``resumed`` (the checkpoint and the run it continues)."""
    fields = {}
    if plan.checkpoint_every:
        written = logs[0].checkpoints if logs else []
        fields["checkpoints"] = {"dir": str(Path(directory).resolve()),
                                 "every": plan.checkpoint_every, "written": written}
    if plan.resume:
        fields["resumed"] = plan.resume.record()
    return fields


def preempted(log, directory: str) -> str:
    """The error of a preempted run: the signal, the step, and how to go on."""
    signum = stop_signal()
    name = signal.Signals(signum).name if signum else "a stop signal"
    folder = step_folder(Path(directory).resolve(), log.preempted_step)
    return (f"preempted by {name} after step {log.preempted_step}; its checkpoint is {folder}: "
            f"'parbench run' with the same options and --resume-from {folder} finishes it")
