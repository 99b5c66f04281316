"""``parbench convert``'s worker side: a native checkpoint's training state loaded by its
framework's 1-device strategy and written as a portable checkpoint (parbench.run.portable)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol

from parbench.base.files import write_atomic

from .checkpoint import FORMAT, MANIFEST, STATE, VERSION, checksums
from .job import Job
from .portable import API, PORTABLE, TrainingState, write_state

PORTABLE_FOLDER = "portable"  # in the converting job's folder, moved into place by the harness


class Converter(Protocol):
    """The strategy's side (parbench.run.loop.Strategy has these)."""

    def load_checkpoint(self, folder: Path) -> None:
        """Restore the state of a native checkpoint's ``state/``."""

    def portable_state(self, step: int) -> TrainingState:
        """The training state, as it stands after ``step`` steps, in the contract's terms."""


def export(job: Job, strategy: Converter) -> None:
    """``parbench convert``'s worker (a run's job with ``export_portable``): load the native
    checkpoint the job resumes from, and write its state as a portable checkpoint into the
    job's folder (``PORTABLE_FOLDER``), for the harness to move into place. No step is taken."""
    source = Path(job.checkpoint_plan.resume_from)
    native = json.loads((source / MANIFEST).read_text())
    strategy.load_checkpoint(source / STATE)
    state = strategy.portable_state(native["step"])
    write_portable(job.path / PORTABLE_FOLDER, state, job.optimizer_spec.name, native, source)


def write_portable(folder: Path, state: TrainingState, optimizer: str, native: dict,
                   source: Path) -> None:
    """A whole portable checkpoint in ``folder`` (a new folder): ``state`` and a manifest that
    keeps the native checkpoint's (``native``, read from ``source``) but its framework, API and
    files, and says where it came from."""
    write_state(folder / STATE, state, optimizer)
    manifest = {key: value for key, value in native.items() if key != "files"}
    manifest.update(format=FORMAT, version=VERSION, framework=PORTABLE, api=API,
                    converted_from={"folder": str(source.resolve()),
                                    "framework": native["framework"], "api": native["api"],
                                    "backend": native["backend"]},
                    files=checksums(folder))
    write_atomic(folder / MANIFEST, json.dumps(manifest, indent=1).encode())
