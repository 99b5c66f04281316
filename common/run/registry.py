"""The frameworks parbench compares, declared once.

Everything that depends on which frameworks exist is derived from this table: the backends and
their launchers' command lines, which launchers span nodes, the run modes a framework or a
backend refuses (with the reason), the CLI's --framework choices, the record schema's framework
names, parity's framework list and its reference, the report's order and each framework's
1-device baseline, and the tests' skip markers (tests/conftest.py). Nothing here imports a
framework: strategy modules are import strings, imported only in the worker process.

Adding a framework is its folder under frameworks/, its entry here, its extra in pyproject.toml
and its tox envs (docs/adding-a-framework.md); tests/test_registry.py fails when a folder and
the registry disagree.
"""

from __future__ import annotations

import importlib
import importlib.util
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Protocol

from parbench.base.devices import gpu_count
from parbench.base.ports import LOCALHOST, free_port


@dataclass(frozen=True)
class Backend:
    name: str
    framework: str  # its Framework's name
    strategy: str  # what the record calls the parallel approach
    module: str  # the strategy file, imported only in the worker process
    launchers: tuple[str, ...]  # names in LAUNCHERS; the first is the default
    parallel: bool  # can train on more than one device
    one_process: bool = False  # one process drives every device (DataParallel, Mirrored, pmap)
    # on CPU it cannot use several devices; the hint names the backend that can
    gpu_for_parallel: str | None = None
    refusals: dict[str, str] = field(default_factory=dict)  # mode -> why this backend can't
    launcher_refusals: dict[str, str] = field(default_factory=dict)  # launcher -> why not
    profile_refusal: str | None = None  # why --profile cannot split its step
    # parameters, gradients and optimizer state sharded over the devices (FSDP, ZeRO)
    sharded: bool = False
    reshards: bool = False  # --reshard-after-forward chooses when it frees gathered parameters
    replicated_twin: str | None = None  # a sharded backend's replicated counterpart
    gpu_only: str | None = None  # why it runs on GPUs only (refused on a machine without)
    # a multi-process backend whose processes score the test set with the same BatchNorm
    # running statistics anyway: how (None: each process scores with its own)
    shared_eval_statistics: str | None = None
    # the framework API its checkpoints are written with (parbench.run.checkpoint); None: it
    # writes none yet, and --checkpoint-every and --resume-from are refused for it
    checkpoint: str | None = None

    @property
    def info(self) -> Framework:
        return FRAMEWORKS[self.framework]

    def missing_reason(self) -> str | None:
        """Why this backend cannot run in this environment, or None if it can."""
        missing = self.info.missing_reason()
        if missing is None and self.gpu_only and not gpu_count():
            return f"needs GPUs, this machine has none: {self.gpu_only}"
        return missing

    def load(self) -> ModuleType:
        return importlib.import_module(self.module)


@dataclass(frozen=True)
class Operator:
    """The Kubeflow training operator job that runs a framework's multi-node backends on
    Kubernetes (parbench.launch.k8s): the operator injects each pod's place into the container
    of this name and reads the rendezvous port from its port of this name
    (kubeflow/training-operator, pkg/apis/kubeflow.org/v1/<framework>_types.go)."""

    kind: str  # PyTorchJob, ...; its SDK spec's replica field is <kind less "Job">_replica_specs
    container: str  # the operator's default container name
    port_name: str  # the operator's default port name
    port: int  # the operator's default port
    master_replica: bool = False  # PyTorchJob: MASTER_ADDR and RANK only with a Master replica


@dataclass(frozen=True)
class Framework:
    name: str  # the record's "framework" and its folder under frameworks/
    imports: tuple[str, ...]  # installed means every one of these is importable
    extra: str  # pip install 'parbench[<extra>]'
    backends: tuple[Backend, ...]  # its 1-device backend first
    # mode (or "mode=value", one value only) -> why no backend of it can
    refusals: dict[str, str] = field(default_factory=dict)
    gpu_only: dict[str, str] = field(default_factory=dict)  # mode -> why it needs GPUs
    gpu_only_pairs: dict[tuple[str, str], str] = field(default_factory=dict)  # two modes
    profile_note: str | None = None  # what its --profile phases include, for the report
    no_sharding: str | None = None  # why it has no sharded backend (on this kind of machine)
    # installed distributions besides the framework whose versions a record keeps
    companions: tuple[str, ...] = ()
    # Its headline approach on several devices, declared before anything is measured: the one
    # a user of the framework would reach for on one machine. The headline shows each
    # framework by it (at 1 device by its single backend), never by whichever approach ran
    # fastest, which would reward the luckiest of several runs within noise of each other.
    # None: it declares none, so it is in no headline line of several devices.
    representative: str | None = None
    operator: Operator | None = None  # its Kubernetes training operator's job (parbench k8s)

    def __post_init__(self) -> None:
        names = {b.name: b for b in self.backends}
        if self.representative is not None and not (
                self.representative in names and names[self.representative].parallel):
            raise ValueError(f"{self.name}: representative {self.representative!r} is not one "
                             "of its parallel backends")

    @property
    def single(self) -> str:
        """Its 1-device backend: the baseline of its scaling efficiency and parity."""
        return self.backends[0].name

    @property
    def test_files(self) -> tuple[str, ...]:
        """How its tests are selected: tests/test_<name>.py and tests/test_*_<name>.py, which
        are skipped where it is not installed."""
        return (f"test_{self.name}.py", f"test_*_{self.name}.py")

    def missing_reason(self) -> str | None:
        for name in self.imports:
            if importlib.util.find_spec(name) is None:
                return f"{name} is not installed (pip install 'parbench[{self.extra}]')"
        return None


class Rendezvous(Protocol):
    """Where the nodes of a multi-node run meet, as a launcher's command line needs it
    (parbench.launch.nodes.Nodes is one)."""

    nnodes: int
    node_rank: int
    master_host: str
    master_port: int

    @property
    def loopback(self) -> bool: ...


@dataclass(frozen=True)
class Launcher:
    name: str
    # argv for this node's part of a run (devices of its own); None: parbench.run.worker itself
    # (one process, or one that starts the workers)
    argv: Callable[[Path, int, Rendezvous | None], list[str]] | None = None
    single_node: str | None = None  # why it cannot span machines (None: it can)
    # each node reports its workers' ports at check-in (TF_CONFIG; JAX's coordinator takes node
    # 0's first)
    worker_ports: bool = False
    # what listens once it has started a run on one machine, and where its port comes from
    # (measured with ss where docs/security.md says so): the ports table of docs/security.md
    listens: str = ""

    def command(self, job_path: Path, devices: int, nodes: Rendezvous | None = None) -> list[str]:
        """argv that runs the job on this node, with ``devices`` of its own; with ``nodes``,
        this node's part of a multi-node run, meeting the others at the master."""
        if self.argv is None:
            return [sys.executable, "-m", "parbench.run.worker", str(job_path)]
        return self.argv(job_path, devices, nodes)


def _torchrun(job_path: Path, devices: int, nodes: Rendezvous | None) -> list[str]:
    """One node: c10d on a free loopback port. Several: the static rendezvous, the one where
    --node-rank decides the global ranks (node n gets n x devices onwards; c10d numbers nodes
    in the order they join), its store on node 0 at the master."""
    if nodes is None:
        rendezvous = ["--nnodes=1", "--rdzv-backend=c10d",
                      f"--rdzv-endpoint={LOCALHOST}:{free_port()}", f"--local-addr={LOCALHOST}"]
    else:
        local = [f"--local-addr={LOCALHOST}"] if nodes.loopback else []
        rendezvous = [f"--nnodes={nodes.nnodes}", f"--node-rank={nodes.node_rank}",
                      "--rdzv-backend=static", f"--master-addr={nodes.master_host}",
                      f"--master-port={nodes.master_port}", *local]
    return [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={devices}",
            *rendezvous, "-m", "parbench.run.worker", str(job_path)]


def _paddle_launch(job_path: Path, devices: int, nodes: Rendezvous | None) -> list[str]:
    """--host: without it the launcher announces this node at the address its host name
    resolves to, which on most machines is not loopback (on a real cluster that address is the
    right one, except on node 0: see _address_of). --master is an address, never a name (also
    _address_of). --rank fixes the node's place (unset, nodes are numbered as they join).
    Unset: FLAGS_print_launcher_env makes the launcher print a failed worker's whole
    environment (into the record's error tail), and PADDLE_LOG_DIR would override --log_dir."""
    if nodes is None:
        rendezvous = [f"--master={LOCALHOST}:{free_port()}", f"--host={LOCALHOST}"]
    else:
        master = _address_of(nodes.master_host)
        host = [f"--host={LOCALHOST}"] if nodes.loopback else \
            [f"--host={master}"] if nodes.node_rank == 0 else []
        rendezvous = [f"--nnodes={nodes.nnodes}", f"--rank={nodes.node_rank}",
                      f"--master={master}:{nodes.master_port}", *host]
    script = importlib.util.find_spec("parbench.run.worker").origin
    return ["env", "-u", "FLAGS_print_launcher_env", "-u", "PADDLE_LOG_DIR", sys.executable,
            "-m", "paddle.distributed.launch", f"--nproc_per_node={devices}", *rendezvous,
            f"--log_dir={job_path.parent / 'launch-log'}", script, str(job_path)]


def _address_of(host: str) -> str:
    """The IPv4 address Paddle's launcher needs for --master: it starts its rendezvous server
    only on the node whose own address equals the master's host as written (HTTPMaster compares
    strings), so with a host name, as Slurm's nodelists give, no node starts it and every node
    waits for ever (measured on a two-node Slurm cluster). Node 0 is also told, with --host,
    that this address is its own: Paddle would otherwise take the one its host name resolves
    to, which need not be the one the other nodes reach it at."""
    try:
        return socket.gethostbyname(host)
    except OSError as err:
        raise RuntimeError(f"paddle-launch: the master host {host!r} has no IPv4 address "
                           f"({err})") from None


LAUNCHERS: dict[str, Launcher] = {launcher.name: launcher for launcher in (
    Launcher("python", single_node="one process drives every device",
             listens="nothing: one process drives every device, so there is no rendezvous"),
    Launcher("spawn", single_node="it starts every process on this machine "
             "(torch.multiprocessing.spawn / paddle.distributed.spawn)",
             listens="torch (`mp.spawn`): no store, the ranks meet through a `file://` in the "
             "run's private temp folder; each rank's gloo listener on 127.0.0.1. Paddle "
             "(`paddle.distributed.spawn`): rank 0's TCPStore on 0.0.0.0, its gloo listeners "
             "on 127.0.0.1 (measured)"),
    Launcher("tf-config", worker_ports=True,
             listens="each worker's gRPC server, bound to every interface, at the port its "
             "`TF_CONFIG` names: one free 127.0.0.1 port per worker, picked by the "
             "supervising process (`frameworks/tensorflow/cluster.py`; measured)"),
    Launcher("jax-distributed", worker_ports=True,
             listens="process 0's `jax.distributed` coordinator at a free 127.0.0.1 port the "
             "supervising process picks (`frameworks/jax/multiprocess.py`), bound to "
             "127.0.0.1 only on one machine (`coordinator_bind_address`); the CPU "
             "collectives between the processes go through gloo. Across machines the "
             "coordinator is at node 0's first worker port, bound to every interface "
             "(JAX's default). Not measured with ss: this backend came after the "
             "tables below"),
    Launcher("torchrun", _torchrun,
             listens="the launcher's c10d rendezvous store at the `--rdzv-endpoint` port and the "
             "agent store the ranks use as `MASTER_PORT`, both bound to every interface; "
             "each rank's gloo listener on 127.0.0.1 (measured)"),
    Launcher("paddle-launch", _paddle_launch,
             listens="rank 0's TCPStore on 0.0.0.0 at the `PADDLE_MASTER` port; the `--master` "
             "port was not seen listening on one machine; gloo listeners on 127.0.0.1 "
             "(measured)"),
)}

_T, _TF, _PD, _JX = "parbench.frameworks.torch", "parbench.frameworks.tensorflow", \
    "parbench.frameworks.paddle", "parbench.frameworks.jax"
NO_CPU_AMP = ("Paddle AMP has no effect on CPU: under paddle.amp.auto_cast to bfloat16 or "
              "float16 a Conv2D's and a Linear's outputs stay float32, eagerly and under "
              "to_static, with only a warning that AMP needs a CUDA, XPU or custom place "
              "(measured, Paddle 3.3.1)")
PADDLE_SHARDING = ("paddle.distributed.sharding.group_sharded_parallel asserts a GPU, XPU or "
                   "custom device ('group_sharded_parallel only support gpu, xpu and "
                   "custom_device now', Paddle 3.3.1)")
# What paddle-sharding refuses: parbench could not run it here (no GPU), so a mode that changes
# what group_sharded_parallel wraps is refused rather than assumed to work
PADDLE_SHARDING_UNVERIFIED = {
    "compile": "to_static around a group-sharded layer",
    "grad_accum": "its gradient buffers would need the stage's no_sync",
    "precision": "fp16 needs the scaler passed to group_sharded_parallel",
    "input": "the distributed loader with a sharded model"}
# One process holds the whole state: torch.save of torch.distributed.checkpoint.state_dict's
# get_state_dict. A process group: each rank writes its shards with DCP.
TORCH_SAVE = "torch.save (get_state_dict)"
TORCH_DCP = "torch.distributed.checkpoint"
# The model's variables by canonical name and the optimizer, from every process (only the
# chief's files stay); a mirrored variable is saved once and loads on any number of replicas
TF_CHECKPOINT = "tf.train.Checkpoint (CheckpointManager)"
# rank 0's Layer and optimizer state_dicts (.pdparams, .pdopt), each rank's own BatchNorm
# statistics and random state beside them
PADDLE_SAVE = "paddle.save (state_dict)"
# Every JAX strategy: each array as its sharding places it (a stacked one, replica 0's copy),
# restored into the reading strategy's shardings
JAX_ORBAX = "orbax.checkpoint (StandardCheckpointer)"
JAX_PROFILE = ("XLA compiles forward, backward and the update into one program, so parbench "
               "cannot time them apart; use jax.profiler around a run")

FRAMEWORKS: dict[str, Framework] = {framework.name: framework for framework in (
    Framework("torch", ("torch",), "torch", (
        Backend("torch-single", "torch", "single", f"{_T}.single", ("python",), parallel=False,
                checkpoint=TORCH_SAVE),
        Backend("torch-dp", "torch", "DataParallel", f"{_T}.dp", ("python",), parallel=True,
                one_process=True, gpu_for_parallel="use torch-ddp for multi-process CPU runs",
                checkpoint=TORCH_SAVE,
                refusals={
                    "sync_bn": "nn.SyncBatchNorm reduces over a torch.distributed process "
                    "group, which nn.DataParallel's one process does not have: without one it "
                    "silently runs as per-replica BatchNorm (use torch-ddp)",
                    "compile": "nn.DataParallel runs each replica's forward in a worker thread "
                    "that torch.compile's frame hook does not reach (the replicas run "
                    "eagerly), and replicating a compiled module instead empties the "
                    "original's parameters (use torch-ddp)"}),
        Backend("torch-ddp", "torch", "DistributedDataParallel", f"{_T}.ddp",
                ("torchrun", "spawn"), parallel=True, checkpoint=TORCH_DCP),
        Backend("torch-fsdp", "torch", "FSDP2 (fully_shard)", f"{_T}.fsdp",
                ("torchrun", "spawn"), parallel=True, sharded=True, reshards=True,
                replicated_twin="torch-ddp", checkpoint=TORCH_DCP)),
        gpu_only={"sync_bn": "nn.SyncBatchNorm needs CUDA (it raises ValueError on CPU)"},
        profile_note="under DDP communication overlaps backward (it is inside it, not added)",
        # DistributedDataParallel: what PyTorch's docs recommend over DataParallel
        representative="torch-ddp",
        operator=Operator("PyTorchJob", "pytorch", "pytorchjob-port", 23456,
                          master_replica=True)),
    Framework("tensorflow", ("tensorflow",), "tensorflow", (
        Backend("tf-single", "tensorflow", "single", f"{_TF}.single", ("python",),
                parallel=False, checkpoint=TF_CHECKPOINT),
        Backend("tf-mirrored", "tensorflow", "MirroredStrategy", f"{_TF}.mirrored",
                ("python",), parallel=True, one_process=True, checkpoint=TF_CHECKPOINT),
        Backend("tf-mirrored-keras", "tensorflow", "MirroredStrategy+fit",
                f"{_TF}.mirrored_keras", ("python",), parallel=True, one_process=True,
                refusals={"grad_accum": "Keras fit applies the optimizer on every batch; "
                          "gradient accumulation needs a custom loop (use tf-mirrored)"},
                launcher_refusals={"tf-config": "Keras 3 fit fails under "
                                   "MultiWorkerMirroredStrategy upstream, keras-team/keras#20585:"
                                   " use tf-multiworker"},
                profile_refusal="Keras fit runs its own training loop, so parbench cannot "
                "time its steps by phase; profile tf-mirrored, the same strategy in a custom "
                "loop"),
        Backend("tf-multiworker", "tensorflow", "MultiWorkerMirroredStrategy",
                f"{_TF}.multiworker", ("tf-config",), parallel=True,
                checkpoint=TF_CHECKPOINT)),
        refusals={"loader_workers": "tf.data has no worker processes: it parallelises inside "
                  "the pipeline (num_parallel_calls, prefetch), which --input native sets to "
                  "AUTOTUNE"},
        gpu_only_pairs={("sync_bn", "compile"): "the synchronized BatchNorm's all-reduce "
                        "inside the XLA-compiled gradient function is a cross-replica "
                        "merge_call, which TensorFlow refuses inside a nested function unless "
                        "every device is a GPU"},
        profile_note="phases are estimates by subtraction of separately compiled functions",
        no_sharding="tf.distribute has no sharded data parallelism: MirroredStrategy and "
        "MultiWorkerMirroredStrategy keep a whole copy of every variable on each replica "
        "(ParameterServerStrategy puts variables on parameter servers, another architecture), "
        "and Keras 3's distribution API (keras.distribution.ModelParallel) is implemented for "
        "the JAX backend only (keras-io, guides/distribution.py). DTensor can split a variable "
        "over logical CPU devices (measured, TF 2.21: a [64, 32] DVariable laid out on its "
        "first axis is [32, 32] on each of 2), but no tf.distribute strategy and no Keras 3 "
        "training loop uses it",
        companions=("keras",),
        # tf.distribute's strategy for the devices of one machine, in a custom loop
        representative="tf-mirrored",
        operator=Operator("TFJob", "tensorflow", "tfjob-port", 2222)),
    Framework("paddle", ("paddle",), "paddle", (
        Backend("paddle-single", "paddle", "single", f"{_PD}.single", ("python",),
                parallel=False, checkpoint=PADDLE_SAVE),
        Backend("paddle-spawn", "paddle", "DataParallel", f"{_PD}.spawn", ("spawn",),
                parallel=True, checkpoint=PADDLE_SAVE),
        Backend("paddle-launch", "paddle", "DataParallel", f"{_PD}.launch", ("paddle-launch",),
                parallel=True, checkpoint=PADDLE_SAVE),
        Backend("paddle-sharding", "paddle", "group_sharded_parallel (ZeRO)", f"{_PD}.sharding",
                ("paddle-launch",), parallel=True, sharded=True, reshards=True,
                replicated_twin="paddle-launch", gpu_only=PADDLE_SHARDING,
                refusals={mode: f"not verified with group_sharded_parallel: {why}" for mode, why
                          in PADDLE_SHARDING_UNVERIFIED.items()} | {
                    "clip_grad_norm": "the shared global-norm clip would take each rank's norm "
                    "of its own gradient shards; Paddle's sharded clip is not wired in"})),
        gpu_only={"sync_bn": "paddle.nn.SyncBatchNorm has no CPU kernel (its forward raises "
                  "'The kernel `sync_batch_norm` is not registered', measured on Paddle 3.3.1)",
                  "precision": NO_CPU_AMP},
        profile_note="communication is a separately timed all-reduce of the gradients' size "
        "(the real one is inside backward)",
        # paddle.distributed.launch: the launcher Paddle's data-parallel guide starts with
        representative="paddle-launch",
        operator=Operator("PaddleJob", "paddle", "master", 36543)),
    Framework("jax", ("jax", "flax", "optax"), "jax", (
        Backend("jax-single", "jax", "single (jit)", f"{_JX}.single", ("python",),
                parallel=False, profile_refusal=JAX_PROFILE, checkpoint=JAX_ORBAX),
        Backend("jax-pmap", "jax", "pmap", f"{_JX}.pmap", ("python",), parallel=True,
                one_process=True, profile_refusal=JAX_PROFILE, checkpoint=JAX_ORBAX),
        Backend("jax-sharded", "jax", "jit+NamedSharding", f"{_JX}.sharded", ("python",),
                parallel=True, one_process=True, profile_refusal=JAX_PROFILE,
                checkpoint=JAX_ORBAX),
        Backend("jax-fsdp", "jax", "jit+NamedSharding (sharded state)", f"{_JX}.fsdp",
                ("python",), parallel=True, one_process=True, profile_refusal=JAX_PROFILE,
                sharded=True, replicated_twin="jax-sharded", checkpoint=JAX_ORBAX),
        # measured (resnet, digits, 20 steps, 2 devices: the record's test loss against that
        # of the exported rank-0 weights on the whole test set, relative): 2e-8, where
        # torch-ddp's was 3.1e-3 and torch-fsdp's, paddle-spawn's, tf-multiworker's 4.1e-3
        Backend("jax-multiprocess", "jax", "jax.distributed (a process per device)",
                f"{_JX}.multiprocess", ("jax-distributed",), parallel=True,
                profile_refusal=JAX_PROFILE, shared_eval_statistics="it gathers device 0's "
                "running statistics onto every process before scoring", checkpoint=JAX_ORBAX)),
        refusals={"compile": "JAX always compiles: every training step is one jax.jit "
                  "(jax-single, jax-sharded) or jax.pmap (jax-pmap) program, compiled by XLA on "
                  "its first call, so --compile would change nothing (the record's "
                  "compiled_graphs counts the step's compilations: 1)",
                  "input": "JAX has no input pipeline of its own (JAX programs are fed numpy "
                  "arrays, often from tf.data or grain): the arrays feed is its only input",
                  "precision=fp16": "fp16 needs loss scaling against underflowing gradients, "
                  "which neither Flax nor Optax provides; --precision bf16 (Flax's dtype on "
                  "every layer, float32 parameters) has float32's range and needs none"},
        companions=("jaxlib", "flax", "optax"),
        # jit with shardings: what JAX's docs now teach for data parallelism (not pmap)
        representative="jax-sharded",
        operator=Operator("JAXJob", "jax", "jaxjob-port", 6666)),
)}

BACKENDS: dict[str, Backend] = {b.name: b for f in FRAMEWORKS.values() for b in f.backends}
REFERENCE = "torch"  # parity compares every framework against it


def get_backend(name: str) -> Backend:
    if name not in BACKENDS:
        raise KeyError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    return BACKENDS[name]


def spanning_backends() -> str:
    """The backends (and launchers) that run on several machines, for error messages."""
    return ", ".join(f"{b.name} ({launcher})" for b in BACKENDS.values()
                     for launcher in b.launchers if LAUNCHERS[launcher].single_node is None)
