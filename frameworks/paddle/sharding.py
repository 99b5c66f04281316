"""paddle-sharding: ZeRO through ``paddle.distributed.sharding.group_sharded_parallel``, one
process per GPU, started by ``python -m paddle.distributed.launch``.

``--reshard-after-forward yes`` (the default) is Paddle's level ``p_g_os`` (ZeRO-3: parameters,
gradients and optimizer state sharded; each layer's parameters gathered for its forward and
again for its backward); ``no`` is level ``os_g`` (ZeRO-2: gradients and optimizer state
sharded, the parameters whole on every rank). Level ``os`` (ZeRO-1) has no flag here.

GPU and XPU only: group_sharded_parallel asserts the device, so on a machine without GPUs
parbench refuses this backend before a run starts (parbench.run.registry). The modes it was
not run with are refused too; benchmarks/gpu_acceptance.py runs it against paddle-launch where
GPUs are. The process group, data shard, sum and launcher are paddle-launch's.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from functools import partial

import numpy as np
import paddle
from paddle import nn
from paddle.distributed.sharding import group_sharded_parallel

from parbench.run.job import Job
from parbench.run.loop import run_worker

from .data_parallel import DataParallelStrategy
from .launch import build
from .model import export_weights

LEVELS = {"yes": "p_g_os", "no": "os_g"}


class GroupShardedStrategy(DataParallelStrategy):
    # --- setup: one process group, one GPU per process (DataParallelStrategy)

    # --- model: every rank loads the same canonical weights; the layer is sharded together
    # with its optimizer once that exists (``shard``), not wrapped in DataParallel
    def wrap(self, module: nn.Layer) -> nn.Layer:
        return module

    def shard(self, model: nn.Layer, optimizer: paddle.optimizer.Optimizer
              ) -> tuple[nn.Layer, paddle.optimizer.Optimizer]:
        self.level = LEVELS[self.modes.reshard_after_forward]
        model, optimizer, _ = group_sharded_parallel(model, optimizer, self.level)
        return model, optimizer

    # --- data shard: this rank's contiguous part of each global batch (DataParallelStrategy)

    # --- step: the sharded layer reduces each gradient to the rank that holds its shard
    # inside backward, and the sharded optimizer updates that shard (and gathers the updated
    # parameters at level os_g); --grad-accum is refused (parbench.run.registry)
    def hold_gradients(self) -> AbstractContextManager:
        return nullcontext()

    # --- eval: each rank scores its part of the test set, then the counts are summed

    # --- export: at level p_g_os the layers hold shards: gather every parameter first (a
    # collective: every rank exports, rank 0 writes)
    def export_weights(self) -> dict[str, np.ndarray]:
        if self.level == "p_g_os":
            self.model.get_all_parameters()
        return export_weights(self.module)


def main(job: Job) -> None:
    run_worker(job, partial(build, strategy_class=GroupShardedStrategy))
