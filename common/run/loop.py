"""The training loop every strategy runs in, framework-free.

A strategy file (``frameworks/<framework>/<strategy>.py``) supplies a ``Strategy``: how to set
up, build the model, take a step and evaluate. This loop owns everything that must be identical
across frameworks: which rows each process reads, the learning rate of each step, when to
evaluate and how the run's task scores it, when a loss that is no longer finite stops training
(every process at the same step), and how time and memory are measured. Each process writes
``rank<N>.json`` at the end; the harness aggregates those files into the run's record. With
``--profile``, the steps of ``job.profile_steps`` go through the strategy's profiler instead
(see profiling.py).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import resource
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from parbench.base.files import write_atomic
from parbench.contract.batches import eval_slice
from parbench.contract.data import Dataset
from parbench.contract.optim import lr_at
from parbench.contract.tasks import Task
from parbench.contract.weights import save_weights

from .checkpoint import Saver
from .collect import collect_rank_files
from .convert import export
from .feeds import ArrayFeed, Feed, FeedLog, run_length
from .footprint import Communication, StateBytes
from .job import FAULT_ENV, PREDICTIONS_FILE, Job, write_error
from .modes import Observed, check_observed
from .portable import TrainingState
from .profiling import Session, StepProfiler

EVAL_CHUNK = 1024  # rows per evaluate() call: bounds memory, not part of the contract
PROGRESS_EVERY_S = 0.5


class Strategy(Protocol):
    rank: int  # this process's index among num_processes
    num_processes: int  # processes that read data (1 for single, DataParallel, Mirrored)

    def train_step(self, x: np.ndarray, y: np.ndarray, lr: float) -> float:
        """One optimizer step on this process's rows (numpy, or what its native feed
        yields); returns their mean loss."""

    def evaluate(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
        """(the model's outputs that the task scores, loss_sum) over the given rows, inference
        mode, this process only (image classification: the predicted class of each row)."""

    def all_reduce_sum(self, values: np.ndarray) -> np.ndarray:
        """Sum across processes (identity with one process)."""

    def synchronize(self) -> None:
        """Wait for queued device work, so host clocks measure it."""

    def peak_device_mb(self) -> list[float] | None:
        """Allocator peak per device this process drives, or None without an accelerator."""

    def export_weights(self) -> dict[str, np.ndarray]:
        """Current weights in the canonical layout."""

    def describe(self) -> dict:
        """framework, framework_version, device_names, cuda/nccl versions, notes."""

    def teardown(self, failed: bool) -> None:
        """Release what the strategy holds (its process group), once, when training ended.
        ``failed``: this rank raised, and its peers may be blocked in a collective it will never
        join, so it must not run a collective release (destroying an NCCL group is one, and
        waits for them: pytorch/torchtitan#1342); it releases only its own side, or leaves that
        to the process's exit."""

    def profiler(self) -> StepProfiler:
        """--profile: this strategy's step split into phases, and its framework's profiler."""

    def observed(self) -> Observed:
        """What the run modes did (see parbench.run.modes); valid once the first step ran."""

    def state_bytes(self) -> list[StateBytes] | None:
        """The training state each device of this process holds (after the first step), or
        None where the framework's strategies do not count it."""

    def step_communication(self) -> Communication | None:
        """What one training step's collectives carry per device (valid after the first step),
        or None where the framework's strategies do not count it."""

    def native_feed(self, job: Job, data: Dataset) -> Feed:
        """--input native: this process's batches from its framework's own loader, each
        carrying the training-set indices of its rows (see parbench.run.feeds)."""

    def save_checkpoint(self, folder: Path) -> None:
        """Write this process's part of the full training state into ``folder`` in the
        framework's own format (see parbench.run.checkpoint)."""

    def load_checkpoint(self, folder: Path) -> None:
        """Restore the training state a checkpoint's ``state/`` folder holds."""

    def portable_state(self, step: int) -> TrainingState:
        """The training state after ``step`` steps in the contract's terms, for a portable
        checkpoint (parbench.run.portable): canonical weights, the optimizer rule's slots."""

    def load_portable(self, state: TrainingState) -> None:
        """Restore a portable checkpoint's state, written by any framework."""


@dataclass
class RankLog:
    rank: int
    rows: int  # training rows per step on this process
    first_step_start: float = 0.0  # time.time() when step 0 began
    step_s: list[float] = field(default_factory=list)
    cpu_s: list[tuple[float, float]] = field(default_factory=list)  # (user, system) per step
    losses: list[float] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)
    peak_rss_mb: float = 0.0
    peak_device_mb: list[float] | None = None
    describe: dict = field(default_factory=dict)
    profile: dict | None = None  # --profile: Session.result() of this rank
    observed: dict | None = None  # asdict(Observed) at the end of training
    input: dict | None = None  # FeedLog.write(): what fed the steps, epochs, waits
    host: str = ""  # the machine's host name
    node: int = 0  # the node of a multi-node run
    diverged_step: int | None = None  # the step after which training stopped: a loss not finite
    state_bytes: list[dict] | None = None  # asdict(StateBytes) per device, after step 0
    communication: dict | None = None  # asdict(Communication) of one step
    first_step: int = 0  # a resumed run's: the checkpoint's step (step_s[0] is this step's)
    checkpoints: list[dict] = field(default_factory=list)  # {step, save_s} of each one written
    preempted_step: int | None = None  # steps done when a stop signal ended the run


def cpu_times() -> tuple[float, float]:
    """This process's user and system CPU seconds so far, every thread counted: a framework's
    intra-op pool and a collective that busy-waits show here, not in the wall time."""
    times = os.times()
    return times.user, times.system


def cpu_since(start: tuple[float, float]) -> tuple[float, float]:
    now = cpu_times()
    return now[0] - start[0], now[1] - start[1]


def inject_test_fault(rank: int, step: int) -> None:
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    kind, fault_rank, fault_step = spec.split(":")
    if int(fault_rank) != rank or int(fault_step) != step:
        return
    if kind == "crash":
        raise RuntimeError(f"injected fault on rank {rank} at step {step}")
    if kind == "exit":
        os._exit(17)
    if kind in ("kill", "stop"):  # what an operator's kill -9 or kill -STOP does
        os.kill(os.getpid(), signal.SIGKILL if kind == "kill" else signal.SIGSTOP)
    while kind == "hang":
        time.sleep(1)


def evaluate_test_set(strategy: Strategy, data: Dataset, task: Task, step: int,
                      train_s: float, predictions_to: Path | None = None) -> dict:
    """The task's scores over the whole test set (for image classification: accuracy, loss, the
    confusion matrix and macro scores): each process scores its part, then the counts are
    summed across processes and the scores computed from the sums. ``predictions_to``: where
    this process writes the task's predictions of every test row (Task.predictions), which the
    summed counts hold."""
    start = time.perf_counter()
    rows = eval_slice(len(data.y_test), strategy.num_processes, strategy.rank)
    counts = np.zeros(task.count_size)
    for begin, end in eval_chunks(rows, len(data.y_test), strategy.num_processes):
        labels = np.asarray(data.y_test[begin:end])
        outputs, loss_sum = strategy.evaluate(np.asarray(data.x_test[begin:end]), labels)
        counts += task.eval_counts(labels, outputs, loss_sum)
    score_s = time.perf_counter() - start  # this rank alone: no collective yet
    totals = strategy.all_reduce_sum(counts)
    if predictions_to is not None:
        write_atomic(predictions_to, json.dumps(task.predictions(totals)).encode())
    return {"step": step + 1, **task.eval_scores(totals), "train_s": train_s,
            "eval_s": time.perf_counter() - start, "score_s": score_s}


class Evaluations:
    """When the loop evaluates, and whether a --target stops it. Evaluations come at every
    epoch's end, or every ``job.eval_every`` steps, and after the last step. Each one's
    ``wall_s`` runs on the clock of time to target, as MLPerf's: it starts at the first touch
    of training data (start-up, model building and weight loading stay off it; the first
    step's compilation is on it, since that step trains) and counts everything after,
    evaluations and data waits included."""

    def __init__(self, job: Job, strategy: Strategy, data: Dataset):
        self.job, self.strategy, self.data = job, strategy, data
        self.target = None if job.target is None else job.task.target_of(job.target_metric)
        self.clock_start = 0.0

    def start_clock(self) -> None:
        self.clock_start = time.perf_counter()

    def due(self, index: int, epoch_end: bool, total: int) -> bool:
        every = self.job.eval_every
        return index == total - 1 or ((index + 1) % every == 0 if every else epoch_end)

    def reached_target(self, log: RankLog, index: int, train_s: float) -> bool:
        """Evaluate after step ``index`` into ``log``; whether the run's target is reached.
        Every process scores the same summed counts, and the processes still agree on the
        answer (any one reaching it stops all), so all of them stop after the same step."""
        keep = self.job.save_predictions and self.strategy.rank == 0
        scores = evaluate_test_set(self.strategy, self.data, self.job.task, index, train_s,
                                   self.job.path / PREDICTIONS_FILE if keep else None)
        reached = self.target is not None \
            and self.target.reached(scores[self.target.metric], self.job.target)
        if self.target is not None and self.strategy.num_processes > 1:
            reached = bool(self.strategy.all_reduce_sum(np.array([float(reached)]))[0])
        log.evals.append({**scores, "wall_s": time.perf_counter() - self.clock_start})
        return reached


def eval_chunks(rows: range, total: int, processes: int) -> list[tuple[int, int]]:
    """``rows`` in chunks of at most EVAL_CHUNK, as many on every process (the largest part's
    count; a chunk may be empty): a sharded model gathers its parameters in every forward, a
    collective that every process must join."""
    largest = -(-total // processes)
    count = max(1, -(-largest // EVAL_CHUNK))
    bounds = np.linspace(rows.start, rows.stop, count + 1).round().astype(int)
    return list(zip(bounds[:-1].tolist(), bounds[1:].tolist()))


def check_modes(job: Job, strategy: Strategy) -> None:
    """After the first step: fail the run when a mode asked for did not take effect."""
    check_observed(job.modes, strategy.observed(),
                   clips=job.optimizer_spec.clip_grad_norm is not None)


def open_feed(job: Job, strategy: Strategy, data: Dataset) -> Feed:
    if job.modes.input == "native":
        return strategy.native_feed(job, data)
    return ArrayFeed(job, data, strategy.rank, strategy.num_processes)


class Progress:
    """The node's first rank tells its harness how far it is, at most every PROGRESS_EVERY_S
    seconds."""

    def __init__(self, job: Job, rank: int, total: int):
        self.path = job.path / "progress.json" if rank == job.first_rank else None
        self.total, self.last = total, 0.0

    def update(self, done: int, force: bool = False) -> None:
        now = time.monotonic()
        if self.path is None or (not force and now - self.last < PROGRESS_EVERY_S):
            return
        self.last = now
        write_atomic(self.path, json.dumps({"done": done, "total": self.total}).encode())


def run_worker(job: Job, build: Callable[[Job], Strategy],
               train: Callable[[Strategy], RankLog] | None = None) -> RankLog | None:
    """Build this process's strategy, train it for the run's steps on the feed's batches
    (evaluating when ``Evaluations`` says, and stopping at a --target; ``train`` replaces this
    loop where a framework's own one drives the steps: Keras fit), then tear it down however
    training ended (``parbench convert``'s job instead loads the checkpoint it names and writes
    it portable: parbench.run.convert). A failure is written to the job's errors first, then
    re-raised after a failed teardown (see Strategy.teardown). A strategy that fails to build
    holds nothing to tear down."""
    try:
        strategy = build(job)
    except BaseException:
        write_error(job, f"process {os.getpid()}")  # no strategy, so no rank to name yet
        raise
    try:
        if job.export_portable:  # parbench convert: load a checkpoint, write it portable
            log = None
            export(job, strategy)
        else:
            log = train(strategy) if train else _train(job, strategy)
    except BaseException:
        write_error(job, f"rank {strategy.rank}")
        strategy.teardown(failed=True)
        raise
    strategy.teardown(failed=False)
    return log


def _train(job: Job, strategy: Strategy) -> RankLog:
    data = Dataset.load(job.data_path, job.dataset)
    feed = open_feed(job, strategy, data)
    total = run_length(job, feed)
    log = RankLog(rank=strategy.rank, rows=job.global_batch // strategy.num_processes)
    fed = FeedLog(feed)
    saver = _saver(job, feed, total)
    log.first_step = start = saver.resume(strategy) if saver else 0
    progress, optimizer, train_s = Progress(job, strategy.rank, total - start), \
        job.optimizer_spec, 0.0
    session = Session(strategy.profiler(), job.profile_steps, strategy.train_step) \
        if job.profile_steps else None
    evaluations = Evaluations(job, strategy, data)
    evaluations.start_clock()  # the first touch of training data is next
    # the order is a function of the seed and the epoch (the contract's, a seeded sampler's):
    # a resumed run passes over the batches its checkpoint's steps trained on
    batches = itertools.islice(feed.batches(total), start, None)
    for index in range(start, total):
        waited = time.perf_counter()
        batch = next(batches)
        fed.add(batch, time.perf_counter() - waited)
        lr = lr_at(index, total, optimizer)
        inject_test_fault(strategy.rank, index)
        if index == start:
            log.first_step_start = time.time()
        take_step = session.take(index) if session else strategy.train_step
        begin, cpu = time.perf_counter(), cpu_times()
        loss = take_step(batch.x, batch.y, lr)
        strategy.synchronize()
        elapsed = time.perf_counter() - begin
        log.cpu_s.append(cpu_since(cpu))
        if session:
            session.done(index)
        if index == start:
            check_modes(job, strategy)
            log.state_bytes, log.communication = footprint(strategy)
        log.step_s.append(elapsed)
        log.losses.append(float(loss))
        train_s += elapsed
        progress.update(index + 1 - start)
        finite, stop = agree(strategy, log.losses[-1], saver is not None and job.stop_asked)
        if not finite:
            log.diverged_step = index  # no evaluation of a model gone non-finite
            break
        if saver and (stop or saver.due(index + 1)):
            log.checkpoints.append(saver.save(strategy, index + 1, log.losses, log.rows))
        if stop:  # preempted: the harness records it so, and --resume-from goes on from here
            log.preempted_step = index + 1
            break
        if evaluations.due(index, batch.epoch_end, total) \
                and evaluations.reached_target(log, index, train_s):
            break
    progress.update(len(log.step_s), force=True)
    log.profile = session.result() if session else None
    return finish_rank_log(job, strategy, log, fed)


def _saver(job: Job, feed: Feed, total: int) -> Saver | None:
    plan = job.checkpoint_plan
    if plan is None:
        return None
    return Saver(plan, job.backend, job.world_size, total, feed.steps_per_epoch)


def footprint(strategy: Strategy) -> tuple[list[dict] | None, dict | None]:
    """The state this process's devices hold and what a step's collectives carry, for the
    log (taken after the first step, when the optimizer's state exists)."""
    held, moved = strategy.state_bytes(), strategy.step_communication()
    return (None if held is None else [asdict(device) for device in held],
            None if moved is None else asdict(moved))


def all_finite(strategy: Strategy, loss: float) -> bool:
    """Whether this step's loss is finite on every process (see ``agree``)."""
    return agree(strategy, loss, False)[0]


def agree(strategy: Strategy, loss: float, stop: bool) -> tuple[bool, bool]:
    """(this step's loss is finite on every process, any process was asked to stop). A NaN or
    infinite gradient shows here one step later, in the loss of the weights it made; a stop
    comes to each node's processes through its harness's STOP_FILE. The processes decide
    together, in one all-reduce, so all of them stop at the same step: a rank that left alone
    would leave its peers waiting in the next gradient all-reduce. One process decides alone,
    at no cost."""
    flags = np.array([0.0 if math.isfinite(loss) else 1.0, 1.0 if stop else 0.0])
    if strategy.num_processes > 1:
        flags = strategy.all_reduce_sum(flags)
    return not flags[0], bool(flags[1])


def finish_rank_log(job: Job, strategy: Strategy, log: RankLog, fed: FeedLog) -> RankLog:
    """What a rank records after its last step (its machine, memory peaks, its description,
    what its modes did, what it was fed), then its rank file; on several nodes, rank 0 then
    gathers every rank's files."""
    log.host, log.node = socket.gethostname(), job.node_rank
    log.peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    log.peak_device_mb = strategy.peak_device_mb()
    log.describe = strategy.describe()
    log.observed = asdict(strategy.observed())
    log.input = fed.write(job.path, strategy.rank)
    write_rank_log(job, strategy, log)
    if job.nnodes > 1:  # node 0's harness needs every node's files (see parbench.run.collect)
        collect_rank_files(job.path, strategy)
    return log


def write_rank_log(job: Job, strategy: Strategy, log: RankLog) -> None:
    if job.save_weights:  # every rank exports: a sharded strategy gathers the whole tensors
        weights = strategy.export_weights()
        if strategy.rank == 0:
            save_weights(job.path / "final_weights.npz", weights)
    write_atomic(job.path / f"rank{strategy.rank}.json", json.dumps(asdict(log)).encode())
