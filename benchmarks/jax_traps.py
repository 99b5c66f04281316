"""The JAX traps docs/porting.md quotes, measured on 2 logical CPU devices:

1. shard_map's gradient of a replicated parameter: under the default ``check_vma=True`` it
   comes back already summed over the axis, so pmap's recipe (an explicit ``lax.pmean`` of the
   gradients) leaves it N times too large and ``lax.psum`` N^2 times; with ``check_vma=False``
   the explicit pmean gives the global batch's gradient. Printed: the elementwise ratio to the
   one-device gradient of the global-batch mean (its min and max), on a least-squares toy.
2. The all-reduces in the compiled training step of the BatchNorm resnet (2 devices): jax-pmap's
   (explicit pmean) and jax-sharded's (XLA's own), with per-device BatchNorm and with
   --sync-bn (every BatchNorm layer's statistics all-reduced; jax-sharded's --sync-bn program
   is also the naive one, BatchNorm over the sharded batch axis), without and with --grad-accum
   2, counted in the optimized HLO: the ops written, and the ops one step executes (those in
   the micro-batch loop's body once per micro-batch).

    python benchmarks/jax_traps.py

Each compiled step is the real strategy's (jax-pmap's, jax-sharded's ``compiled_step``), built
in a process of its own (a strategy sets the device count before JAX's backend starts).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from parbench.contract.optim import OptimizerSpec
from parbench.contract.spec import build_spec
from parbench.contract.weights import initial_weights
from parbench.frameworks.jax import runtime, training

DEVICES = 2


def shard_map_ratios() -> None:
    mesh = Mesh(np.array(jax.devices()[:DEVICES]), ("data",))
    rng = np.random.default_rng(0)
    w, x, y = (jnp.asarray(rng.normal(size=shape), jnp.float32)
               for shape in ((5, 3), (8, 5), (8, 3)))

    def loss(w, x, y):
        return jnp.mean((x @ w - y) ** 2)

    true = jax.grad(loss)(w, x, y)  # one device, the global batch's mean
    print(f"## shard_map, {DEVICES} devices: gradient of a replicated parameter / the "
          f"one-device gradient (min, max)\n")
    print("| check_vma | reduction | ratio |\n|---|---|---|")
    for check in (True, False):
        for name, reduce in (("lax.pmean", lax.pmean), ("lax.psum", lax.psum)):
            def local(w, x, y, reduce=reduce):
                return reduce(jax.grad(loss)(w, x, y), "data")

            reduced = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P(), P("data"), P("data")),
                                         out_specs=P(), check_vma=check))
            ratio = np.asarray(reduced(w, x, y) / true)
            print(f"| {check} | {name} | {ratio.min():.7g} to {ratio.max():.7g} |")


ALL_REDUCE = re.compile(r" all-reduce(?:-start)?\(")
COMPUTATION = re.compile(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$")
LOOP = re.compile(r" while\(.*?body=%?([\w.\-]+).*?known_trip_count\D*(\d+)")


def all_reduces(text: str) -> tuple[int, int]:
    """(all-reduce ops in the optimized HLO, all-reduces one call executes: those in a while
    loop's body counted once per trip)."""
    per_computation: dict[str, int] = {}
    name = ""
    for line in text.splitlines():
        match = COMPUTATION.match(line)
        if match:
            name = match.group(1)
        per_computation[name] = per_computation.get(name, 0) + len(ALL_REDUCE.findall(line))
    written = sum(per_computation.values())
    executed = written + sum(per_computation.get(body, 0) * (int(trips) - 1)
                             for body, trips in LOOP.findall(text))
    return written, executed


def strategy_program(backend: str, sync: bool, parts: int) -> str:
    """The optimized HLO of the real strategy's training step (its own ``compiled_step``),
    built from a job like a run's: the digits resnet, global batch 32."""
    import tempfile
    from dataclasses import asdict

    from parbench.contract.spec import spec_dict
    from parbench.contract.tasks import ImageClassification
    from parbench.contract.weights import save_weights
    from parbench.frameworks.jax import pmap, sharded
    from parbench.run.job import Job
    from parbench.run.modes import Modes

    spec = build_spec("resnet", (1, 8, 8), 10)  # the digits resnet
    with tempfile.TemporaryDirectory() as folder:
        save_weights(f"{folder}/weights.npz", initial_weights(spec, 0))
        job = Job(backend=backend, launcher="python", world_size=DEVICES, threads=DEVICES,
                  model=spec_dict(spec), dataset="digits", task_fields={"classes": 10},
                  task_name=ImageClassification.name, global_batch=32,
                  total_steps=1, optimizer=asdict(OptimizerSpec()), seed=0, workdir=folder,
                  shared=folder, modes=Modes(sync_bn=sync, grad_accum=parts))
        strategy = (pmap.Pmap if backend == "jax-pmap" else sharded.Sharded)(job)
    placement = strategy.per_device if backend == "jax-pmap" else strategy.rows
    x = training.row_blocks(np.zeros((32, 1, 8, 8), np.float32), placement)
    y = training.row_blocks(np.zeros(32, np.int32), placement)
    return strategy.step.lower(strategy.state, x, y, np.float32(0.1)).compile().as_text()


def step_all_reduces() -> None:
    """Each program in a process of its own: a strategy sets the device count before JAX's
    backend starts, once per process."""
    print(f"\n## all-reduces in the compiled step of each strategy, resnet (9 BatchNorm "
          f"layers), {DEVICES} devices\n")
    print("| program | BatchNorm statistics | --grad-accum | all-reduce ops | executed per step |")
    print("|---|---|---|---|---|")
    for backend in ("jax-pmap", "jax-sharded"):
        for sync in (False, True):
            for parts in (1, 2):
                done = subprocess.run([sys.executable, __file__, "--count", backend, str(sync),
                                       str(parts)], capture_output=True, text=True, check=True)
                written, executed = json.loads(done.stdout)
                what = "global (--sync-bn)" if sync else "per device"
                print(f"| {backend} | {what} | {parts} | {written} | {executed} |")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--count"]:
        backend, sync, parts = sys.argv[2], sys.argv[3] == "True", int(sys.argv[4])
        print(json.dumps(all_reduces(strategy_program(backend, sync, parts))))
    else:
        runtime.configure(SimpleNamespace(world_size=DEVICES, nnodes=1, threads=DEVICES))
        print(f"jax {jax.__version__}, devices {jax.devices()[:DEVICES]}\n")
        shard_map_ratios()
        step_all_reduces()
