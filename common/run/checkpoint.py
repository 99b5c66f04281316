"""Checkpoints: the full training state of a run at a step, in its framework's own format, and
the loop's side of writing and resuming them (framework-free).

``--checkpoint-every N --checkpoint-dir DIR`` writes ``DIR/step-N/`` after every N-th step:

    DIR/step-32/parbench.json   where training stands (the step, the losses so far), what wrote
                                it (backend, devices, run, configuration) and the sha256 and
                                size of every file below
    DIR/step-32/state/          the framework's own checkpoint: weights, optimizer state (its
                                moments and step counts), the loss scale, random states

The step's position decides everything else a resume needs: the learning rate of each step is
a function of the step (parbench.contract.optim.lr_at), and so are the rows of each global
batch (parbench.contract.batches.schedule), so a resumed run reads the same rows in the same
order as an uninterrupted one.

A checkpoint appears whole or not at all: every rank writes into ``DIR/.step-N.partial``, the
ranks wait for each other, and rank 0 writes parbench.json last and renames the folder. A
folder without parbench.json, or whose files do not match their checksums, is not a
checkpoint, and ``--resume-from DIR`` passes over it to the latest one that is.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Protocol

import numpy as np

from parbench.base.errors import CheckpointError
from parbench.base.files import write_atomic

from .portable import PORTABLE, TrainingState, read_state

STEP_PREFIX = "step-"
MANIFEST = "parbench.json"
STATE = "state"  # the framework's own files, under the step's folder
FORMAT = "parbench-checkpoint"
VERSION = 1


class Checkpointer(Protocol):
    """The strategy's side (parbench.run.loop.Strategy has these)."""

    rank: int
    num_processes: int

    def save_checkpoint(self, folder: Path) -> None:
        """Write this process's part of the training state into ``folder`` (every process
        calls it, at the same step) with its framework's API (the backend's ``checkpoint``)."""

    def load_checkpoint(self, folder: Path) -> None:
        """Restore the training state that ``folder`` (a step's ``state/``) holds."""

    def load_portable(self, state: TrainingState) -> None:
        """Restore a portable checkpoint's state (parbench.run.portable)."""

    def all_reduce_sum(self, values: np.ndarray) -> np.ndarray:
        """Sum across processes: here, the barrier between writing and renaming."""


@dataclass(frozen=True)
class Checkpoints:
    """What a run does with checkpoints (the Job's ``checkpoints``), and who it is, for the
    manifests it writes."""

    every: int | None  # --checkpoint-every: write one after every N-th step (None: never)
    directory: str | None  # --checkpoint-dir
    resume_from: str | None  # a step's folder the harness checked (None: a fresh start)
    framework: str
    api: str  # the backend's checkpoint API
    run_id: str
    spec_sha256: str
    config: dict
    tensors: dict[str, list[int]]  # the model's canonical tensors and their shapes

    def due(self, steps_done: int) -> bool:
        return bool(self.every) and steps_done % self.every == 0


@dataclass
class Written:
    """What a checkpoint's parbench.json holds besides its files' checksums."""

    step: int  # steps done: the resumed run's first step is this one
    total_steps: int
    epoch: int  # of the contract's order, for the reader: the step decides it
    step_in_epoch: int
    backend: str
    framework: str
    world_size: int
    api: str  # the framework's checkpoint API (parbench.run.registry.Backend.checkpoint)
    run_id: str  # the run that wrote it
    spec_sha256: str  # its configuration's (parbench.launch.harness.spec_hash)
    config: dict  # its RunConfig, flat: what a mismatch is explained from
    tensors: dict[str, list[int]]  # the model's canonical tensors and their shapes
    losses: list[float] = field(default_factory=list)  # every step's so far, resumed ones too
    created: float = 0.0  # time.time()


class Saver:
    """The loop's side of checkpoints: restore the state a run resumes from, and write one
    after every N-th step."""

    def __init__(self, plan: Checkpoints, backend: str, world_size: int, total_steps: int,
                 steps_per_epoch: int):
        self.plan, self.total_steps, self.steps_per_epoch = plan, total_steps, steps_per_epoch
        self.writer = dict(backend=backend, framework=plan.framework, world_size=world_size)
        self.earlier: list[float] = []  # the losses of the steps before the resumed one

    def resume(self, strategy: Checkpointer) -> int:
        """Load the checkpoint the run resumes from (the harness checked it before the launch);
        returns its step, the first this run takes (0 for a fresh start)."""
        if self.plan.resume_from is None:
            return 0
        folder = Path(self.plan.resume_from)
        manifest = json.loads((folder / MANIFEST).read_text())
        if manifest["framework"] == PORTABLE:  # parbench convert's, of any framework
            strategy.load_portable(read_state(folder / STATE))
        else:
            strategy.load_checkpoint(folder / STATE)
        self.earlier = manifest["losses"]
        return manifest["step"]

    def due(self, steps_done: int) -> bool:
        return self.plan.due(steps_done)

    def save(self, strategy: Checkpointer, steps_done: int, losses: list[float],
             rows: int) -> dict:
        """Write the checkpoint after ``steps_done`` steps (``losses``: this process's of this
        run so far, each the mean over its ``rows``); returns its step and the seconds it took,
        for the rank's log."""
        start = time.perf_counter()
        epoch, in_epoch = divmod(steps_done, self.steps_per_epoch)
        plan = self.plan
        written = Written(step=steps_done, total_steps=self.total_steps, epoch=epoch,
                          step_in_epoch=in_epoch, **self.writer, api=plan.api,
                          run_id=plan.run_id, spec_sha256=plan.spec_sha256, config=plan.config,
                          tensors=plan.tensors,
                          losses=self.earlier + global_losses(strategy, losses, rows))
        size = write(strategy, Path(plan.directory), written)
        return {"step": steps_done, "save_s": time.perf_counter() - start, "bytes": size}


def global_losses(strategy: Checkpointer, losses: list[float], rows: int) -> list[float]:
    """Each step's loss over the whole global batch, as the record's loss curve has it: the
    processes' means weighted by their rows (one process: its own)."""
    if strategy.num_processes == 1:
        return list(losses)
    sums = strategy.all_reduce_sum(np.array([*losses, 1.0]) * rows)
    return (sums[:-1] / sums[-1]).tolist()


def step_folder(directory: Path, step: int) -> Path:
    return Path(directory) / f"{STEP_PREFIX}{step}"


def write(strategy: Checkpointer, directory: Path, written: Written) -> int | None:
    """Every process calls this after the same step: the strategy writes its state into a
    partial folder, the processes wait for each other, then rank 0 writes the manifest and
    renames the folder into place (replacing one of the same step). Returns the bytes of the
    framework's files on rank 0 (None on the others, which do not list them)."""
    final = step_folder(directory, written.step)
    partial = final.with_name(f".{final.name}.partial")
    if strategy.rank == 0:
        shutil.rmtree(partial, ignore_errors=True)  # a crashed writer's, never a checkpoint
        partial.mkdir(parents=True)
    _barrier(strategy)  # the folder exists before anyone writes into it
    strategy.save_checkpoint(partial / STATE)
    _barrier(strategy)  # every rank's files are written
    size = None
    if strategy.rank == 0:
        written.created = time.time()
        files = checksums(partial)
        manifest = {"format": FORMAT, "version": VERSION, **asdict(written), "files": files}
        write_atomic(partial / MANIFEST, json.dumps(manifest, indent=1).encode())
        _replace(partial, final)
        size = sum(file["bytes"] for file in files.values())
    _barrier(strategy)  # no rank reads or writes on while the rename is under way
    return size


def _barrier(strategy: Checkpointer) -> None:
    if strategy.num_processes > 1:
        strategy.all_reduce_sum(np.zeros(1))


def _replace(partial: Path, final: Path) -> None:
    """Rename ``partial`` to ``final``; an older ``final`` is set aside first and removed after,
    so a crash leaves one whole checkpoint of the step or the other."""
    old = final.with_name(f".{final.name}.old")
    if final.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.rename(final, old)
    os.rename(partial, final)
    shutil.rmtree(old, ignore_errors=True)


def checksums(folder: Path) -> dict[str, dict]:
    """sha256 and size of every file under ``folder`` but the manifest, by relative path."""
    found = {}
    for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
        name = path.relative_to(folder).as_posix()
        if name != MANIFEST:
            found[name] = {"sha256": _sha256(path), "bytes": path.stat().st_size}
    return found


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read(folder: Path) -> dict:
    """A checkpoint's manifest, its files checked against it; CheckpointError says what is
    wrong (missing, unreadable, not parbench's, a file changed or gone, an extra file)."""
    folder = Path(folder)
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{folder} is not a checkpoint: it has no {MANIFEST} (a "
                              "checkpoint whose writing was interrupted has none)") from None
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{folder / MANIFEST} cannot be read: {err}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CheckpointError(f"{folder / MANIFEST} is not a parbench checkpoint's manifest")
    if manifest.get("version") != VERSION:
        raise CheckpointError(f"{folder} is a checkpoint of version {manifest.get('version')}; "
                              f"this parbench reads version {VERSION}")
    missing = [key for key in (*(f.name for f in fields(Written)), "files") if key not in manifest]
    if missing:
        raise CheckpointError(f"{folder / MANIFEST} lacks {', '.join(missing)}")
    found = checksums(folder)
    for name in sorted(set(manifest["files"]) | set(found)):
        if name not in found:
            raise CheckpointError(f"{folder}: {name} is missing")
        if name not in manifest["files"]:
            raise CheckpointError(f"{folder}: {name} is not one of the checkpoint's files")
        if found[name] != manifest["files"][name]:
            raise CheckpointError(f"{folder}: {name} does not match its checksum (changed or "
                                  "damaged since it was written)")
    return manifest


def latest(directory: Path) -> Path:
    """``directory`` itself when it is a step's folder, else its latest whole checkpoint
    (step-N folders with a manifest, the highest N); CheckpointError when there is none."""
    directory = Path(directory)
    if not directory.is_dir():
        raise CheckpointError(f"--resume-from {directory}: no such folder")
    if (directory / MANIFEST).exists() or directory.name.startswith(STEP_PREFIX):
        return directory
    steps = sorted((int(p.name[len(STEP_PREFIX):]), p) for p in directory.iterdir()
                   if p.name.startswith(STEP_PREFIX) and p.name[len(STEP_PREFIX):].isdigit()
                   and (p / MANIFEST).is_file())
    if not steps:
        raise CheckpointError(f"--resume-from {directory}: no checkpoint in it (no "
                              f"{STEP_PREFIX}N folder with a {MANIFEST})")
    return steps[-1][1]
