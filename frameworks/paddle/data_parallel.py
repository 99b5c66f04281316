"""The strategy behind paddle-spawn and paddle-launch: ``paddle.DataParallel``, one process per
device.

Both launchers leave the rendezvous facts in the environment (PADDLE_TRAINER_ID,
PADDLE_TRAINERS_NUM, endpoints on 127.0.0.1) and ``init_parallel_env`` reads them: gloo on CPU,
NCCL on GPUs. Each process feeds only its contiguous part of every global batch; the loss is the
mean over that part and DataParallel averages gradients across processes during backward, which
equals the gradient of the global-batch mean because all parts have the same size.
"""

from __future__ import annotations

import numpy as np
import paddle
import paddle.distributed as dist

from parbench.contract.data import Dataset
from parbench.contract.weights import load_weights
from parbench.run.job import Job

from . import optim, runtime
from .input import LoaderFeed, distributed_feed
from .model import build_model, model_notes
from .modes import ModelModes
from .profile import StepProfiler


class DataParallelStrategy(runtime.PaddleStrategy):
    # --- setup: one process group, one device per process
    def __init__(self, job: Job):
        runtime.setup_threads(job)
        dist.init_parallel_env()
        if dist.get_world_size() != job.world_size:
            raise RuntimeError(f"the launcher started {dist.get_world_size()} processes, "
                               f"the job asks for {job.world_size}")
        # With one process Paddle creates no process group and DataParallel passes through
        self.grouped = job.world_size > 1
        self.device = runtime.use_device(distributed=True)
        runtime.reset_peak_memory([self.device])
        # --- model: every rank loads the same canonical weights; DataParallel also broadcasts
        # rank 0's. The run modes change the bare model first: DataParallel(to_static(model))
        # works, to_static(DataParallel(model)) fails
        self.module = build_model(job.spec, load_weights(job.weights_path))
        self.modes = job.modes
        self.model_modes = ModelModes(self.module, self.modes, replicas=job.world_size)
        self.model = paddle.DataParallel(self.module)
        self.optimizer = optim.make_optimizer(self.module, job.optimizer_spec, job.spec)
        # clipping after backward sees the averaged gradients: the global batch's norm
        self.step = runtime.TrainStep(self.model, self.optimizer, self.modes,
                                      optim.clipper(self.module, job.optimizer_spec))
        self.notes = model_notes(job.spec) + self.model_modes.notes + ([] if self.grouped else [
            "one process: Paddle sets up no process group, DataParallel passes through"])
        # --- data shard: this rank's contiguous part of each global batch (see parbench.contract.batches)
        self.rank, self.num_processes = dist.get_rank(), job.world_size

    # --- input: --input native, DistributedBatchSampler gives this rank its block of each
    # global batch (padded, shuffled by the epoch number, not the run's seed; see input.py)
    def native_feed(self, job: Job, data: Dataset) -> LoaderFeed:
        return distributed_feed(job, data, self.rank)

    # --- step: gradients are all-reduced (averaged) inside backward(); with --grad-accum only
    # in the last micro-batch's (DataParallel.no_sync for the others); --clip-grad-norm clips
    # after that, every rank the same averaged gradients by the same norm
    def train_step(self, x: runtime.Rows, y: runtime.Rows, lr: float) -> float:
        return self.step(x, y, lr)

    # --- eval: each rank scores its part of the test set, then the counts are summed
    def evaluate(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
        return runtime.evaluate(self.module, x, y, self.modes)

    def all_reduce_sum(self, values: np.ndarray) -> np.ndarray:
        if not self.grouped:
            return values
        tensor = paddle.to_tensor(values, dtype="float64")
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor.numpy()

    def describe(self) -> dict:
        return runtime.describe([self.device], self.notes,
                                process_group=dist.get_backend() if self.grouped else None)

    # --- profile: --profile's steps, timed by phase; the all-reduce stays inside backward
    def profiler(self) -> StepProfiler:
        return StepProfiler(self.step, self.synchronize, self.grouped)

    # --- teardown: a finished rank leaves its process group; a failed one leaves it to the
    # process's exit, which releases it without waiting for peers (a collective destroy could
    # wait for peers blocked in a collective this rank will never join)
    def teardown(self, failed: bool) -> None:
        if self.grouped and not failed:
            dist.destroy_process_group()
