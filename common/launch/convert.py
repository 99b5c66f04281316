"""``parbench convert CHECKPOINT --out DIR``: a framework's own checkpoint as a portable one
(parbench.run.portable), which every backend's --resume-from reads.

Only the framework that wrote a checkpoint can read it (a DCP folder, a tf.train.Checkpoint, an
Orbax tree, Paddle's pickles), so the conversion is a job of that framework's 1-device backend,
with the checkpoint's own configuration: it loads the checkpoint as a resumed run would, and
writes its state in the contract's terms instead of training (parbench.run.convert). The
mapping is each framework's (frameworks/<framework>/portable.py); the format and this module
stay framework-free.
"""

from __future__ import annotations

import shutil
import uuid
from dataclasses import replace
from pathlib import Path

from parbench.base.errors import CheckpointError, Unavailable, UsageError
from parbench.base.files import check_new_folder, new_folder, private_tempdir
from parbench.run.checkpoint import MANIFEST, latest, read
from parbench.run.convert import PORTABLE_FOLDER
from parbench.run.modes import MODES
from parbench.run.portable import PORTABLE
from parbench.run.registry import FRAMEWORKS, LAUNCHERS

from .checkpoints import FREE
from .harness import Keep, Prepared, make_job, prepare
from .options import OPTIONS, RunConfig
from .supervise import failure, supervise


class ConvertFailed(RuntimeError):
    """The converting job failed: its error, as a failed run's record would hold it."""


def native_checkpoint(source: Path) -> tuple[Path, dict]:
    """The step's folder ``source`` names (itself, or the latest in it) and its manifest,
    checked; UsageError when it is no checkpoint, or one convert cannot take."""
    try:
        folder = latest(source)
        manifest = read(folder)
    except CheckpointError as err:
        raise UsageError(str(err).replace("--resume-from", "convert")) from None
    if manifest["framework"] == PORTABLE:
        raise UsageError(f"convert: {folder} is portable already (converted from "
                         f"{manifest['converted_from']['backend']}'s); resume from it as it is")
    if manifest["step"] >= manifest["total_steps"]:
        raise UsageError(f"convert: {folder} is the end of its run (step {manifest['step']} of "
                         f"{manifest['total_steps']}): a run of its configuration has nothing "
                         "left to train from it; convert an earlier step")
    if manifest["config"].get("precision") == "fp16":
        raise UsageError(f"convert: {folder} is of an fp16 run: its dynamic loss scale is no "
                         "framework-neutral state (each framework grows its own on a schedule "
                         "of its own), so a portable checkpoint does not carry it")
    return folder, manifest


def converting_config(folder: Path, manifest: dict, timeout: float) -> RunConfig:
    """The checkpoint's configuration on its framework's 1-device backend, resuming from it."""
    framework = FRAMEWORKS[manifest["framework"]]
    backend = framework.backends[0]
    missing = backend.missing_reason()
    if missing:
        raise Unavailable(f"convert: {folder} was written by {manifest['backend']} and only "
                          f"{framework.name} reads it: {missing}")
    kept = {key: value for key, value in manifest["config"].items() if key not in FREE}
    unknown = sorted(set(kept) - set(OPTIONS) - set(MODES))
    if unknown:  # a checkpoint of another parbench version
        raise UsageError(f"convert: {folder} was written with options this parbench does not "
                         f"have ({', '.join(unknown)}); convert it with the version that wrote it")
    return RunConfig.of(**kept, backend=backend.name, devices=1, resume_from=str(folder),
                        timeout=timeout)


def convert(source: Path, out: Path, timeout: float) -> Path:
    """Write ``source``'s checkpoint (a step's folder, or the latest in a folder) portable into
    ``out``, a new folder that appears whole or not at all; returns the step's folder read.
    UsageError on bad input, ConvertFailed when the converting job fails."""
    folder, manifest = native_checkpoint(source)
    check_new_folder(out, "convert")
    with private_tempdir("parbench-run-") as tmp:
        shared, workdir = Path(tmp) / "shared", Path(tmp) / "job"
        shared.mkdir()
        workdir.mkdir()
        prepared = prepare(converting_config(folder, manifest, timeout), shared)
        written = _export(prepared, workdir)
        with new_folder(out) as staging:  # beside out: the job's folder may be elsewhere
            shutil.copytree(written, staging, dirs_exist_ok=True)
    return folder


def _export(prepared: Prepared, workdir: Path) -> Path:
    """Run the converting job; the portable checkpoint it wrote, in ``workdir``."""
    plan, cfg = prepared.plan, prepared.cfg
    job = replace(make_job(prepared, workdir, Keep(), None, uuid.uuid4().hex),
                  export_portable=True)
    command = LAUNCHERS[plan.launcher].command(job.save(), plan.devices_per_node, None)
    status, code = supervise(command, plan, cfg, workdir, None)
    written = workdir / PORTABLE_FOLDER
    if status != "ok" or not (written / MANIFEST).is_file():
        raise ConvertFailed(failure(status, code, plan, cfg, workdir, None))
    return written
