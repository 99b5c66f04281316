"""The strategy behind paddle-spawn and paddle-launch: ``paddle.DataParallel``, one process per
device.

Both launchers leave the rendezvous facts in the environment (PADDLE_TRAINER_ID,
PADDLE_TRAINERS_NUM, endpoints on 127.0.0.1) and ``init_parallel_env`` reads them: gloo on CPU,
NCCL on GPUs. Each process feeds only its contiguous part of every global batch; the loss is the
mean over that part and DataParallel averages gradients across processes during backward, which
equals the gradient of the global-batch mean because all parts have the same size.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

import numpy as np
import paddle
import paddle.distributed as dist
from paddle import nn

from parbench.contract.data import Dataset
from parbench.run.job import Job

from . import runtime
from .input import LoaderFeed, distributed_feed
from .profile import StepProfiler
from .strategy import PaddleStrategy

ONE_PROCESS_NOTE = "one process: Paddle sets up no process group, DataParallel passes through"


class DataParallelStrategy(PaddleStrategy):
    # --- setup: threads and seed (PaddleStrategy), then one process group, one device per
    # process
    def setup_device(self, job: Job) -> str:
        dist.init_parallel_env()
        if dist.get_world_size() != job.world_size:
            raise RuntimeError(f"the launcher started {dist.get_world_size()} processes, "
                               f"the job asks for {job.world_size}")
        # With one process Paddle creates no process group and DataParallel passes through
        self.grouped = job.world_size > 1
        return runtime.use_device(distributed=True)

    # --- model: every rank loads the same canonical weights (PaddleStrategy); DataParallel
    # also broadcasts rank 0's. The run modes change the bare model first:
    # DataParallel(to_static(model)) works, to_static(DataParallel(model)) fails
    def wrap(self, module: nn.Layer) -> nn.Layer:
        return paddle.DataParallel(module)

    # --- data shard: this rank's contiguous part of each global batch (parbench.contract.batches)
    def data_shard(self, job: Job) -> tuple[int, int]:
        return dist.get_rank(), job.world_size

    # --- input: --input native, DistributedBatchSampler gives this rank its block of each
    # global batch (padded, shuffled by the epoch number, not the run's seed; see input.py)
    def native_feed(self, job: Job, data: Dataset) -> LoaderFeed:
        return distributed_feed(job, data, self.rank)

    # --- step: gradients are all-reduced (averaged) inside backward(); with --grad-accum only
    # in the last micro-batch's (runtime.TrainStep enters DataParallel.no_sync for the others);
    # --clip-grad-norm clips after that, every rank the same averaged gradients by the same norm
    def hold_gradients(self) -> AbstractContextManager:
        return self.model.no_sync()

    # --- eval: each rank scores its part of the test set (PaddleStrategy's evaluate), then the
    # counts are summed
    def all_reduce_sum(self, values: np.ndarray) -> np.ndarray:
        if not self.grouped:
            return values
        tensor = paddle.to_tensor(values, dtype="float64")
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor.numpy()

    def describe(self) -> dict:
        notes = self.notes + ([] if self.grouped else [ONE_PROCESS_NOTE])
        return runtime.describe([self.device], notes,
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
