"""Runs one configuration: prepares the shared inputs once, launches each repeat as its own
process tree under the backend's launcher, supervises it (timeout, crash, progress) and turns
what the workers wrote into a record."""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from parbench.base.errors import UsageError
from parbench.base.files import private_tempdir, write_atomic
from parbench.base.ports import free_port
from parbench.contract.batches import steps_per_epoch
from parbench.contract.data import Dataset, DatasetError
from parbench.contract.spec import ModelSpec, sha256_of, spec_dict
from parbench.contract.tasks import Task, task_of_dataset, task_of_model
from parbench.contract.weights import initial_weights, save_weights
from parbench.results.metrics import divergence, warmup_steps
from parbench.results.records import record_name
from parbench.results.samples import input_metrics
from parbench.run.job import PREDICTIONS_FILE, Job
from parbench.run.loop import RankLog
from parbench.run.profiling import window
from parbench.run.registry import LAUNCHERS

from .checkin import CheckIn, NodeFailure, check_in
from .checkpoints import check_checkpoint_dir, job_checkpoints, preempted, resume_point
from .config import Plan, RunConfig, optimizer_settings, resolve, sized
from .exits import first_failure_time
from .load import LoadSample, load_env
from .nodes import comparable
from .nodewatch import Link
from .record import Outcome, Parts, build
from .supervise import failure, supervise


@dataclass
class Prepared:
    """A checked configuration with its inputs on disk, shared by all its repeats."""

    cfg: RunConfig
    plan: Plan
    dataset: Dataset
    task: Task
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
    # a target ends a run early and more evaluations take time: hashed when given, so the
    # runs without them keep the hash they had before either existed
    aimed = {"target": cfg.target, "target_metric": plan.target.metric} if plan.target else {}
    every = {"eval_every": plan.eval_every} if plan.eval_every else {}
    return sha256_of({"model": spec_dict(spec), "data": dataset.fingerprint(),
                      "training": {**training, "batch_mode": plan.batch_mode,
                                   "optimizer": optimizer, "seed": cfg.seed, **aimed, **every}})


def run_variant(plan: Plan) -> dict:
    """What a comparison varies besides the spec, the backend, its launcher and the device
    count (which the record name spells out): part of the record name through a hash, so two
    runs that differ in any of them never share a file and --resume never takes one for the
    other. A new run option that changes speed or results belongs here. ``profile`` is there
    only when True and ``modes`` only when one differs from its default, so a plain run keeps
    the name (and --resume match) it had before either existed."""
    changed = plan.modes.changed()
    return {"threads": plan.threads, "nnodes": plan.nnodes,
            **({"profile": True} if plan.profile else {}),
            **({"modes": changed} if changed else {}),
            **({"checkpoint_every": plan.checkpoint_every} if plan.checkpoint_every else {}),
            **({"resumed_at": plan.resume.step} if plan.resume else {})}


def kept_record(out: Path, prepared: Prepared, repeat: int) -> dict | None:
    """The ok record of exactly this configuration and repeat in ``out``, when one is there:
    what ``--resume`` takes instead of running it again (whichever command wrote it)."""
    plan = prepared.plan
    variant = run_variant(plan)
    path = out / record_name(prepared.cfg.backend, plan.launcher, plan.world_size,
                             prepared.spec_sha256, variant, repeat)
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    same = (record.get("status") == "ok" and record.get("spec_sha256") == prepared.spec_sha256
            and record.get("variant") == variant and record.get("launcher") == plan.launcher)
    return record if same else None


def prepare(cfg: RunConfig, shared: Path, plan: Plan | None = None) -> Prepared:
    """Check ``cfg`` (UsageError on bad input) and write data and weights into ``shared``;
    ``plan``: ``cfg``'s, when the caller has resolved it already."""
    plan = plan or resolve(cfg)  # cheap checks first: no dataset is loaded for a bad backend
    dataset = load_data(cfg)
    if cfg.train_subset is not None:
        dataset = _train_subset(dataset, cfg.train_subset)
    plan = sized(plan, cfg, len(dataset.y_train))
    task = task_of_model(cfg.model).from_data(dataset)
    unreachable = plan.target and task.unreachable(plan.target, cfg.target)
    if unreachable:
        raise UsageError(unreachable)
    try:  # e.g. a vit patch that does not divide the dataset's images
        spec = task.spec_for(cfg.model, dataset.input_shape, cfg.model_sizes())
    except ValueError as err:
        raise UsageError(str(err)) from None
    digest = spec_hash(spec, dataset, plan, cfg)
    plan = replace(plan, resume=resume_point(cfg, plan, spec, digest))
    check_checkpoint_dir(cfg, digest)
    (shared / "data").mkdir(parents=True, exist_ok=True)
    dataset.save(shared / "data")
    save_weights(shared / "weights.npz", initial_weights(spec, cfg.seed))
    return Prepared(cfg, plan, dataset, task, spec, digest, shared)


def load_data(cfg: RunConfig) -> Dataset:
    """The run's dataset, as its task reads it; a file that cannot be read is a UsageError."""
    task = task_of_dataset(cfg.dataset)
    options = {option.name: getattr(cfg, option.name) for option in task.options}
    try:
        return task.load(cfg.dataset, Path(cfg.data_dir) if cfg.data_dir else None, options)
    except DatasetError as err:
        raise UsageError(str(err)) from None


def _train_subset(dataset: Dataset, rows: int) -> Dataset:
    """The first ``rows`` training samples (the test set unchanged)."""
    if rows > len(dataset.y_train):
        raise UsageError(f"--train-subset {rows} exceeds the {len(dataset.y_train)} training "
                         f"samples of {dataset.name}")
    return replace(dataset, x_train=dataset.x_train[:rows], y_train=dataset.y_train[:rows])


def _rank_logs(workdir: Path, ranks: range) -> list[RankLog] | None:
    paths = [workdir / f"rank{r}.json" for r in ranks]
    if not all(p.is_file() for p in paths):
        return None
    return [RankLog(**json.loads(p.read_text())) for p in paths]


@dataclass(frozen=True)
class Keep:
    """What a run keeps beyond its record, and where (None: not kept): the final weights
    (.npz), and the last evaluation's predictions (the task's format, Task.predictions), one
    file per split: the in-domain split's at ``predictions``, another beside it as
    ``<name>-<split><suffix>``."""

    weights: Path | None = None
    predictions: Path | None = None

    def prediction_files(self, splits: Iterable[str]) -> dict[str, Path]:
        path = self.predictions
        return {split: path if split == "val" else
                path.with_name(f"{path.stem}-{split}{path.suffix}") for split in splits}

    def copy_from(self, workdir: Path) -> None:
        """Into place from an ok run's folder: rank 0 wrote them there."""
        if self.weights is not None:
            shutil.copyfile(workdir / "final_weights.npz", self.weights)
        if self.predictions is not None:
            found = json.loads((workdir / PREDICTIONS_FILE).read_text())
            for split, path in self.prediction_files(found).items():
                write_atomic(path, json.dumps(found[split]).encode())


def make_job(prepared: Prepared, workdir: Path, keep: Keep, checked_in: CheckIn | None,
         run_id: str) -> Job:
    plan, cfg = prepared.plan, prepared.cfg
    return Job(backend=cfg.backend, launcher=plan.launcher, world_size=plan.world_size,
               threads=plan.threads, model=spec_dict(prepared.spec), dataset=cfg.dataset,
               task_name=prepared.task.name, task_fields=asdict(prepared.task),
               global_batch=plan.global_batch,
               total_steps=plan.total_steps, optimizer=asdict(plan.optimizer), seed=cfg.seed,
               workdir=str(workdir), shared=str(prepared.shared),
               save_weights=keep.weights is not None,
               save_predictions=keep.predictions is not None, verbose=cfg.verbose,
               profile_steps=_profile_steps(prepared), modes=plan.modes,
               epochs=plan.epochs, eval_every=plan.eval_every,
               target=cfg.target, target_metric=cfg.target_metric,
               nnodes=plan.nnodes,
               node_rank=plan.nodes.node_rank if plan.nodes else 0,
               cluster=checked_in.workers()
               if checked_in and LAUNCHERS[plan.launcher].worker_ports else None,
               checkpoints=job_checkpoints(cfg, plan.backend, plan.resume, run_id,
                                           prepared.spec, prepared.spec_sha256))


def _profile_steps(prepared: Prepared) -> list[int] | None:
    """--profile's window: the record's own warm-up rule decides where steady steps begin."""
    plan = prepared.plan
    if not plan.profile:
        return None
    per_epoch = steps_per_epoch(len(prepared.dataset.y_train), plan.global_batch)
    return window(plan.total_steps, warmup_steps(plan.total_steps), per_epoch)


@dataclass
class Execution:
    """How this node's part of a run went, before it becomes a record."""

    status: str  # ok | failed | timeout | diverged: the whole run's, on several nodes
    error: str | None
    logs: list[RankLog] | None  # the rank files this node reads: every rank's on node 0
    launch: float  # time.time() at the start
    duration: float
    load: dict  # load_env() over the run
    workdir: Path
    diverged: dict | None = None  # where the loss stopped being finite (metrics.divergence)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)  # the record's


def execute(prepared: Prepared, workdir: Path, repeat: int,
            keep: Keep = Keep()) -> Execution:
    """Run this node's part of one repeat in its own process tree. A multi-node run checks in
    with the other nodes first (NodeFailure on a member that cannot reach node 0; on node 0 a
    node that never came is a failed run) and decides its status with them at the end."""
    plan = prepared.plan
    before, launch, run_id = LoadSample.now(), time.time(), uuid.uuid4().hex
    try:
        link, checked_in = _check_in(prepared, repeat)
    except NodeFailure as err:
        if plan.nodes.node_rank:
            raise
        return Execution("failed", str(err), None, launch, time.time() - launch,
                         load_env(before, LoadSample.now()), workdir, run_id=run_id)
    job_path = make_job(prepared, workdir, keep, checked_in, run_id).save()
    launcher = LAUNCHERS[plan.launcher]
    status, code = supervise(launcher.command(job_path, plan.devices_per_node, plan.nodes),
                             plan, prepared.cfg, workdir, link)
    load = load_env(before, LoadSample.now())  # every process of the run is reaped now
    duration = time.time() - launch
    logs = _rank_logs(workdir, _ranks_here(plan)) if status == "ok" else None
    error = None if logs else failure(status, code, plan, prepared.cfg, workdir, link)
    status = "ok" if logs else ("timeout" if status == "timeout" else "failed")
    # every rank stopped at the same step (loop.all_finite); node 0, which has every rank's
    # log, says so for the run
    diverged = divergence(logs) if logs and not (plan.nodes and plan.nodes.node_rank) else None
    if diverged:
        status, error = "diverged", (f"diverged at step {diverged['step']}: rank "
                                     f"{diverged['rank']}'s loss was {diverged['loss']}")
    elif logs and logs[0].preempted_step is not None:
        status, error = "preempted", preempted(logs[0], prepared.cfg.checkpoint_dir)
    if link:
        status, error = link.finish(status, error, first_failure_time(workdir))
    # a diverged or preempted run ran: its facts stay
    kept = logs if status in ("ok", "diverged", "preempted") else None
    return Execution(status, error, kept, launch, duration, load, workdir, diverged, run_id)


def _ranks_here(plan: Plan) -> range:
    """The rank files this node reads: on node 0 every rank's (gathered), else its own."""
    if plan.nodes is None or plan.nodes.node_rank == 0:
        return range(1 if plan.backend.one_process else plan.world_size)
    return plan.nodes.ranks(plan.devices_per_node)


def _check_in(prepared: Prepared, repeat: int) -> tuple[Link | None, CheckIn | None]:
    plan = prepared.plan
    if plan.nodes is None:
        return None, None
    derived = {"world_size": plan.world_size, "threads_resolved": plan.threads,
               "spec_sha256": prepared.spec_sha256, "repeat": repeat}
    ports = [free_port() for _ in range(plan.devices_per_node)] \
        if LAUNCHERS[plan.launcher].worker_ports else []
    return check_in(plan.nodes, comparable(prepared.cfg.as_dict(), derived), ports)


def run_once(prepared: Prepared, repeat: int, keep: Keep = Keep(),
             sweep: dict | None = None) -> Outcome:
    """One repeat (on a multi-node run: node 0's part, recording every node's); always returns
    a record, ok or not, and a profiled ok run's profile document beside it. ``sweep``: the
    record's sweep block, where ``compare`` ran it as one round of a sweep."""
    plan = prepared.plan
    with private_tempdir("parbench-run-") as tmp:
        run = execute(prepared, Path(tmp), repeat, keep)
        fed = None
        if run.status == "ok":  # read while the workers' files are still there
            fed = input_metrics(run.workdir, run.logs, plan.modes.input, prepared.cfg.seed,
                                plan.global_batch, len(prepared.dataset.y_train))
            keep.copy_from(run.workdir)
    return build(Parts(cfg=prepared.cfg, plan=plan, task=prepared.task, spec=prepared.spec,
                       spec_sha256=prepared.spec_sha256, variant=run_variant(plan),
                       repeat=repeat, run=run, fed=fed, sweep=sweep))
