"""JAX backends (jax-single, jax-pmap, jax-sharded) through the CLI: records, two devices against
one (without BatchNorm, with per-replica BatchNorm, with --sync-bn), --grad-accum, clipping,
the refusals, and the setup's guards (devices and threads set before the backend starts, one
device per replica, device d fed shard d). Plus the shard_map trap the strategies avoid.

JAX runs only in subprocesses (never imported here: TensorFlow and Paddle segfault when
imported into one process with another framework, see conftest). Runs go two at a time; each
spends most of its ~10 s compiling the step.
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from conftest import default_threads, needs, parbench, records_in
from parbench.cli.parity import STRATEGY_TOLERANCE

pytestmark = needs("jax")  # importlib.util.find_spec: jax is never imported here

LANES = 2
TRAINING = ["--dataset", "digits", "--steps", "10", "--global-batch", "32"]
NONORM, RESNET = ["--model", "resnet-nonorm"], ["--model", "resnet"]
TWO = ["--devices", "2"]
CLIP = ["--clip-grad-norm", "2.0"]  # clips some of the 10 steps (1 here), not all
BF16 = ["--precision", "bf16"]
RUNS = {  # name: (backend, options)
    "single": ("jax-single", [*NONORM, *CLIP, "--threads", "1"]),
    "pmap": ("jax-pmap", [*NONORM, *CLIP, *TWO]),
    "sharded": ("jax-sharded", [*NONORM, *CLIP, *TWO]),
    "single-accum": ("jax-single", [*NONORM, *CLIP, "--grad-accum", "2"]),
    "single-bn": ("jax-single", RESNET),
    "single-bn-accum": ("jax-single", [*RESNET, "--grad-accum", "2"]),
    "pmap-bn": ("jax-pmap", [*RESNET, *TWO]),
    "sharded-bn": ("jax-sharded", [*RESNET, *TWO]),
    "pmap-sync": ("jax-pmap", [*RESNET, *TWO, "--sync-bn"]),
    "sharded-sync": ("jax-sharded", [*RESNET, *TWO, "--sync-bn"]),
    "single-bf16": ("jax-single", [*NONORM, *CLIP, "--threads", "1", *BF16]),
    "sharded-bf16": ("jax-sharded", [*NONORM, *CLIP, *TWO, *BF16]),
    "sharded-bn-bf16": ("jax-sharded", [*RESNET, *TWO, *BF16]),
}
# --precision bf16 against fp32, the largest loss-curve difference over 10 steps: bfloat16's 8
# significant bits move it (measured 1.6e-3), far less than training moves the loss (~0.3)
BF16_MOVED = (1e-4, 1e-2)
# bf16 on two devices against one: the batch's gradient sums are bfloat16 products added in
# another order, so they differ at bfloat16's rounding, not float32's (measured 8.2e-4)
BF16_DEVICES = 5e-3
RESNET_BATCHNORMS = 9  # stem + 2 per block (3 blocks) + 2 projection shortcuts


def _train(folder: Path, name: str) -> tuple[dict, dict]:
    """(record, final weights) of one RUNS entry through `parbench run`, checked by
    `parbench check`."""
    backend, options = RUNS[name]
    out, weights = folder / name, folder / f"{name}.npz"
    done = parbench("run", backend, *TRAINING, *options, "--save-weights", str(weights),
                    "--out", str(out), cwd=folder)
    assert done.returncode == 0, done.stderr[-3000:]
    checked = parbench("check", str(out))
    assert checked.returncode == 0, checked.stdout
    (record,) = records_in(out)
    assert record["status"] == "ok", record["error"]
    return record, dict(np.load(weights))


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[dict, dict]]:
    folder = tmp_path_factory.mktemp("jax")
    with ThreadPoolExecutor(LANES) as pool:
        return dict(zip(RUNS, pool.map(lambda name: _train(folder, name), RUNS)))


def curve(runs: dict, name: str) -> np.ndarray:
    return np.array(runs[name][0]["metrics"]["loss_curve"])


def gap(runs: dict, a: str, b: str) -> float:
    return float(np.abs(curve(runs, a) - curve(runs, b)).max())


@pytest.mark.slow
def test_records_name_the_devices_threads_and_version(runs):
    version = importlib.metadata.version("jax")
    for name, (record, _) in runs.items():
        env, metrics = record["env"], record["metrics"]
        devices = 2 if "--devices" in RUNS[name][1] else 1
        assert record["framework"] == "jax" and env["framework_version"] == version
        assert env["device_names"] == [f"cpu:{d}" for d in range(devices)], name
        assert env["xla_flags"].endswith(f"--xla_force_host_platform_device_count={devices}")
        # XLA's intra-op pool, counted from the worker's threads: PJRT_NPROC = --threads, but
        # at least one thread per device
        threads = 1 if "--threads" in RUNS[name][1] else default_threads(1)
        assert env["threads_per_worker"] == threads
        assert env["intra_op_threads"] == max(threads, devices), name
        assert metrics["compute_dtype"] == ("bfloat16" if "bf16" in name else "float32"), name
        assert metrics["compiled_graphs"] == 1, name  # one compilation of the step, no retrace
        assert metrics["input"]["matches_contract"], name
        assert env["cuda_version"] is None and metrics["peak_device_mb"] is None


@pytest.mark.slow
def test_two_devices_follow_one_without_batchnorm(runs):
    """Same global batch, same math: only the reduction order differs (measured 2.4e-7 for
    pmap and sharded, 4.8e-7 with --grad-accum 2). Clipping shrinks the same steps."""
    losses = curve(runs, "single")
    assert losses[-1] < losses[0] - 0.3  # the loss really moved
    for name in ("pmap", "sharded", "single-accum"):
        assert gap(runs, "single", name) <= STRATEGY_TOLERANCE, name
        clipped = runs[name][0]["metrics"]["clipped_steps"]
        assert clipped == runs["single"][0]["metrics"]["clipped_steps"] and 0 < clipped < 10
    assert runs["single-accum"][0]["metrics"]["micro_batches"] == 2
    fingerprints = runs["pmap"][0]["metrics"]["input"]["fingerprints"]
    assert len(set(fingerprints)) == 2  # each device its own half


@pytest.mark.slow
def test_batchnorm_statistics_are_per_device_by_default(runs):
    """Without --sync-bn each device normalises its 16 rows alone, so 2 devices leave the
    1-device curve (measured 0.080 after 10 steps), and follow a device accumulating two
    16-row micro-batches instead (2.4e-7, 4.8e-7). jax-sharded must not take BatchNorm's mean
    over its sharded batch axis: that mean is the global one (see test_sync_bn)."""
    for name in ("pmap-bn", "sharded-bn"):
        assert gap(runs, "single-bn", name) > 1e-2, name
        assert gap(runs, "single-bn-accum", name) <= STRATEGY_TOLERANCE, name
        assert runs[name][0]["metrics"]["sync_bn_layers"] == 0


@pytest.mark.slow
def test_both_keep_device_0s_running_statistics(runs):
    """pmap and sharded export device 0's statistics, built from shard 0 only: equal to each
    other (measured 2.2e-7 relative; both equal torch-ddp rank 0's to 2.5e-7), and not the
    1-device run's."""
    pmap, sharded, single = runs["pmap-bn"][1], runs["sharded-bn"][1], runs["single-bn"][1]
    assert set(pmap) == set(sharded) == set(single)
    statistics = [key for key in pmap if "running_" in key]
    assert len(statistics) == 2 * RESNET_BATCHNORMS
    for key in pmap:
        scale = np.abs(sharded[key]).max()
        assert np.abs(pmap[key] - sharded[key]).max() <= 1e-5 * max(scale, 1.0), key
    assert max(np.abs(pmap[k] - single[k]).max() for k in statistics) > 1e-3


@pytest.mark.slow
def test_sync_bn(runs):
    """--sync-bn: 2 devices x 16 rows normalise with the 32 rows' statistics, like 1 device
    (measured 2.4e-7 pmap, 1.2e-7 sharded)."""
    for name in ("pmap-sync", "sharded-sync"):
        assert gap(runs, "single-bn", name) <= STRATEGY_TOLERANCE, name
        assert runs[name][0]["metrics"]["sync_bn_layers"] == RESNET_BATCHNORMS


@pytest.mark.slow
def test_bf16_computes_in_bfloat16_and_trains_like_fp32(runs):
    """--precision bf16 is Flax's dtype on every layer: the traced forward's outputs are
    bfloat16 (the record's compute dtype), the parameters and the optimizer stay float32 (the
    exported weights), BatchNorm computes in float32. The loss curve moves off fp32's by
    bfloat16's rounding, and two devices follow one within it."""
    for name in ("single-bf16", "sharded-bf16", "sharded-bn-bf16"):
        record, weights = runs[name]
        assert record["metrics"]["compute_dtype"] == "bfloat16", name
        assert all(array.dtype == np.float32 for array in weights.values()), name
        assert np.isfinite(curve(runs, name)).all(), name
    assert runs["single"][0]["metrics"]["compute_dtype"] == "float32"
    moved = gap(runs, "single", "single-bf16")
    assert BF16_MOVED[0] < moved < BF16_MOVED[1]
    assert gap(runs, "single-bf16", "sharded-bf16") < BF16_DEVICES


@pytest.mark.parametrize("options,refused", [
    (["--compile"], "--compile is not available for jax-single"),
    (["--precision", "fp16"], "--precision fp16 is not available for jax-single"),
    (["--input", "native"], "--input native is not available for jax-single"),
    (["--profile"], "--profile is not available for jax-single"),
])
def test_refused_modes_say_why(tmp_path, options, refused):
    done = parbench("run", "jax-single", *options, "--out", str(tmp_path / "out"))
    assert done.returncode == 2 and refused in done.stderr
    assert not (tmp_path / "out").exists()


GUARDS = r"""
import json, os
from types import SimpleNamespace
from parbench.frameworks.jax import runtime, training
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

job = SimpleNamespace(world_size=2, nnodes=1, threads=1)
os.environ["XLA_FLAGS"] = ("--xla_cpu_enable_fast_math=false "
                           "--xla_force_host_platform_device_count=5")
settings = runtime.configure(job, 2)  # after `import jax`: the backend has not started yet
devices = runtime.local_devices(2)
out = {"settings": settings, "devices": [str(d) for d in devices],
       "pool": runtime.pool_threads()}
try:
    runtime.configure(job, 2)
except RuntimeError as error:
    out["late"] = str(error)
tree = {"w": jax.device_put(np.ones(3), devices[0])}
try:
    runtime.checked_replica_devices(tree, 2)
except RuntimeError as error:
    out["shared"] = str(error)
blocks = NamedSharding(Mesh(np.array(devices), ("data",)), P("data"))
rows = np.arange(8.0)
placed = training.row_blocks(rows, blocks)
out["blocks"] = [[str(s.device), np.asarray(s.data).ravel().tolist()]
                 for s in placed.addressable_shards]
seen = jax.pmap(lambda x: (jax.lax.axis_index("i"), x.sum()), axis_name="i",
                devices=devices)(placed)
out["pmap"] = [[str(s.device), float(np.asarray(s.data)[0])] for s in seen[1].addressable_shards]
print(json.dumps(out))
"""


def run_script(script: str) -> dict:
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_setup_guards():
    """The device count and threads are set for the backend to read when it starts (the
    user's XLA_FLAGS kept, their device count replaced), too late is an error, two replicas
    on one device are refused, and device d holds (and pmap computes on) rows block d."""
    seen = run_script(GUARDS)
    assert seen["settings"] == {"xla_flags": "--xla_cpu_enable_fast_math=false "
                                "--xla_force_host_platform_device_count=2", "pjrt_nproc": 1}
    assert seen["devices"] == ["cpu:0", "cpu:1"]
    assert seen["pool"] == 2  # PJRT_NPROC=1, but one thread per device at least
    assert "backend started before parbench set its devices" in seen["late"]
    assert "replicas share a device" in seen["shared"]
    assert seen["blocks"] == [["cpu:0", [0, 1, 2, 3]], ["cpu:1", [4, 5, 6, 7]]]
    assert seen["pmap"] == [["cpu:0", 6.0], ["cpu:1", 22.0]]


SHARD_MAP_TRAP = r"""
import json, os
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
import jax, jax.numpy as jnp, numpy as np
from jax import lax
from jax.sharding import Mesh, PartitionSpec as P

mesh = Mesh(np.array(jax.devices()), ("data",))
rng = np.random.default_rng(0)
w, x, y = (jnp.asarray(rng.normal(size=shape), jnp.float32)
           for shape in ((5, 3), (8, 5), (8, 3)))
loss = lambda w, x, y: jnp.mean((x @ w - y) ** 2)
true = jax.grad(loss)(w, x, y)  # the global batch's gradient
local = lambda w, x, y: lax.pmean(jax.grad(loss)(w, x, y), "data")  # the pmap recipe
ratios = {}
for check in (True, False):
    step = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P(), P("data"), P("data")),
                                 out_specs=P(), check_vma=check))
    ratio = np.asarray(step(w, x, y) / true)
    ratios[str(check)] = [float(ratio.min()), float(ratio.max())]
print(json.dumps(ratios))
"""


@pytest.mark.slow
def test_shard_map_pmean_of_replicated_gradients_doubles_them():
    """The trap the strategies avoid (docs/porting.md, section 5.1): under shard_map with its
    default check_vma=True, the gradient of a replicated parameter is already summed over the
    devices, so pmap's explicit pmean returns N times the gradient (measured 2.0 to 2.000002
    on 2 devices); with check_vma=False it is the gradient (1.0 to 1.000001)."""
    ratios = run_script(SHARD_MAP_TRAP)
    assert ratios["True"] == pytest.approx([2.0, 2.0], abs=1e-5)
    assert ratios["False"] == pytest.approx([1.0, 1.0], abs=1e-5)
