"""paddle-single: one process, one device. The baseline Paddle's parallel strategies must match."""

from __future__ import annotations

from paddle import nn

from parbench.contract.data import Dataset
from parbench.run.job import Job
from parbench.run.loop import run_worker

from . import runtime
from .input import LoaderFeed, single_feed
from .strategy import PaddleStrategy


class SingleDevice(PaddleStrategy):
    # --- setup: threads and seed (PaddleStrategy), then the one device
    def setup_device(self, job: Job) -> str:
        return runtime.use_device(distributed=False)

    # --- model: canonical weights, the run modes (--compile: to_static), the shared optimizer
    # rule (sgd or adamw) and --clip-grad-norm, by PaddleStrategy; nothing wraps the Layer
    def wrap(self, module: nn.Layer) -> nn.Layer:
        return module

    # --- data shard: the one process reads every row of each global batch (PaddleStrategy's
    # rank 0 of 1)

    # --- input: --input native, BatchSampler's RandomSampler over every row (numpy's global
    # RNG, seeded with the run's seed; see input.py)
    def native_feed(self, job: Job, data: Dataset) -> LoaderFeed:
        return single_feed(job, data)

    # --- step: PaddleStrategy's runtime.TrainStep: --grad-accum's micro-batches accumulate
    # gradients before the one update, which clips them first (--clip-grad-norm)

    # --- eval: PaddleStrategy's, in the precision the model trains in


def main(job: Job) -> None:
    run_worker(job, SingleDevice)
