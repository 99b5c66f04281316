"""jax-multiprocess: JAX's own multi-process data parallelism, one process per device, as JAX
runs on a cluster: every process calls ``jax.distributed.initialize`` (the coordinator is
process 0's, on loopback on one node, at the master's address across nodes), after which
``jax.devices()`` lists every process's devices and one ``jax.jit`` program runs over a mesh of
them all. On CPU the collectives between processes go through gloo
(``jax_cpu_collectives_implementation``); on GPUs through NCCL.

The program is jax-sharded's (sharded.py): the batch as [N, B/N, ...] row blocks split along
the mesh's ``data`` axis, the parameters replicated, BatchNorm per device unless --sync-bn.
What differs is who holds what. Each process reads only its own rows of each global batch (the
contract's shard of its rank) and makes the global batch of them with
``jax.make_array_from_process_local_data``; each holds only its own device's shard of every
array, so the loss, the evaluation and the export read what this process can address, and the
BatchNorm statistics of device 0 that evaluation and the export use are gathered from
process 0 (``multihost_utils.process_allgather``).

Launched by ``jax-distributed`` (parbench.run.workers): the harness starts one process, which
starts one worker per device of its node and supervises them; a worker that dies takes the
others down and the record names it.
"""

from __future__ import annotations

import atexit
import os
from functools import partial

import numpy as np

from parbench.base.devices import gpu_count
from parbench.base.ports import LOCALHOST, free_port
from parbench.run import workers
from parbench.run.job import Job
from parbench.run.loop import run_worker

LAUNCHER = "jax-distributed"
COORDINATOR_ENV = "PARBENCH_JAX_COORDINATOR"  # HOST:PORT of process 0's coordinator service

# Conditional, as tf-multiworker's: the supervising process only starts the workers and never
# imports JAX (and Flax); every worker imports it here and builds MultiProcess
if workers.worker_index() is not None:
    import jax
    from jax.experimental import multihost_utils

    from . import model, runtime
    from .layers import Params, Stats
    from .sharded import AXIS, Sharded
else:  # MultiProcess is never built in the supervisor: it needs only a base to define it on
    Sharded = object


class MultiProcess(Sharded):
    # --- setup: this process's one device, then the distributed runtime (which must start
    # before anything touches a device), then a mesh over every process's devices
    def __init__(self, job: Job, index: int):
        self.index = index
        super().__init__(job)

    def devices_per_process(self, job: Job) -> int:
        return 1

    def setup_devices(self, job: Job) -> list[jax.Device]:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        local_rank = self.index - job.first_rank
        address = os.environ[COORDINATOR_ENV]
        # on one node the coordinator listens on loopback only (by default JAX binds every
        # interface); no cluster detection: a Slurm job's variables must not override these
        jax.distributed.initialize(
            address, num_processes=job.world_size, process_id=self.index,
            local_device_ids=[local_rank] if gpu_count() else None,
            cluster_detection_method="deactivate",
            coordinator_bind_address=address if address.startswith(LOCALHOST) else None)
        self.rank, self.num_processes = jax.process_index(), jax.process_count()
        devices = jax.devices()  # every process's, in process order: device d is rank d's
        mesh = jax.sharding.Mesh(np.array(devices), (AXIS,))
        self.rows = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(AXIS))
        self.replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
        return devices

    # --- model: jax-sharded's placement; every process puts the same host arrays, and each
    # keeps its own device's shard

    # --- data shard: this process's rows of each global batch (its rank's contiguous part),
    # block ``rank`` of the [N, B/N, ...] global array the program reads
    def place_batch(self, rows: np.ndarray) -> jax.Array:
        return jax.make_array_from_process_local_data(self.rows, rows[np.newaxis])

    # --- step: jax-sharded's program over the global mesh; XLA's collectives cross the
    # processes. The loss is replicated: this process's copy is the global batch's
    def host_loss(self, loss: jax.Array) -> float:
        return float(loss.addressable_data(0))

    # --- eval: each process scores its part of the test set on its own device, with the
    # parameters (replicated: its copy) and device 0's running statistics; the counts summed
    def replica_zero(self) -> tuple[Params, Stats]:
        local = self.devices[0]
        stats = self.device_zero_stats()
        return runtime.on_device(self.state.params, local), jax.device_put(stats, local)

    def device_zero_stats(self) -> Stats:
        """Device 0's running statistics on every process (as host arrays); a stacked tree
        keeps its replica axis, of length 1."""
        if not self.stacked_stats:
            return runtime.host_copy(self.state.stats, self.devices[0], stacked=False)
        gathered = multihost_utils.process_allgather(self.state.stats, tiled=True)
        return jax.tree.map(lambda array: np.asarray(array)[:1], gathered)

    def all_reduce_sum(self, values: np.ndarray) -> np.ndarray:
        # JAX without x64 would carry int64 and float64 as 32 bits: the 64-bit values travel
        # as pairs of uint32 words, unchanged, and are added here
        words = np.ascontiguousarray(values).view(np.uint32)
        gathered = np.asarray(multihost_utils.process_allgather(words))
        return gathered.view(values.dtype).sum(axis=0)

    # --- export: the parameters (this process's copy) and device 0's running statistics
    def export_weights(self) -> dict[str, np.ndarray]:
        stats = jax.tree.map(lambda array: array[0], self.device_zero_stats()) \
            if self.stacked_stats else self.device_zero_stats()
        return model.export_weights(
            self.spec, runtime.host_copy(self.state.params, self.devices[0], stacked=False),
            stats)

    # --- teardown: leave the distributed runtime. Not after a failure: the shutdown waits for
    # every process, and the others are stuck in the step's collective until the supervisor
    # stops them. JAX also shuts down at the interpreter's exit (jax._src.api.clean_up, an
    # atexit hook), where a failed rank hung the same way (measured: until the run's timeout),
    # so a failed rank takes that hook off and exits at once
    def teardown(self, failed: bool) -> None:
        if failed:
            from jax._src import api  # the hook is private; no public call removes it

            atexit.unregister(api.clean_up)
        else:
            jax.distributed.shutdown()


def _coordinator(job: Job, address: str, index: int) -> dict[str, str]:
    return {COORDINATOR_ENV: address}


def main(job: Job) -> None:
    index = workers.worker_index()
    if index is None:  # the supervisor: process 0's coordinator on node 0 (its check-in port)
        address = job.cluster[0] if job.cluster else f"{LOCALHOST}:{free_port()}"
        workers.run(job, LAUNCHER, partial(_coordinator, job, address))
        return
    run_worker(job, partial(MultiProcess, index=index))
