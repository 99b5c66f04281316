"""What a user asks for (RunConfig) and what it resolves to (Plan), with every check that must
fail before anything is launched or written."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, fields
from pathlib import Path
from types import NoneType
from typing import get_args, get_type_hints

import tomllib

from parbench.base.devices import cpu_count, gpu_count
from parbench.base.errors import UsageError
from parbench.contract.data import DATASET_NAMES, NEEDS_DATA_DIR
from parbench.contract.optim import OPTIMIZERS, SCHEDULES, OptimizerSpec, scaled_lr
from parbench.contract.spec import MODEL_NAMES, uses_batchnorm
from parbench.contract.tasks import task_of_dataset, task_of_model
from parbench.run.modes import MODES, Modes, refusal
from parbench.run.registry import BACKENDS, Backend

from .netns import private_network_unavailable
from .nodes import Nodes, NodesError, resolve_nodes

ISOLATION_CHOICES = ("auto", "on", "off")


# What an optimizer option means when not given; an option of the other optimizer is an error.
OPTIMIZER_DEFAULTS = {
    "sgd": {"lr": 0.1, "weight_decay": 5e-4, "momentum": 0.9},
    "adamw": {"lr": 1e-3, "weight_decay": 0.05, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8},
}


@dataclass
class RunConfig:
    backend: str = next(iter(BACKENDS))  # the registry's first framework's single backend
    devices: int | None = None  # default: 2 for a parallel backend, else 1
    launcher: str | None = None  # default: the backend's first launcher
    dataset: str = "synthetic"
    data_dir: str | None = None
    model: str = "resnet"
    epochs: int | None = None  # default 2 when neither epochs nor steps is given
    steps: int | None = None
    global_batch: int | None = None  # default 128 when neither batch option is given
    per_device_batch: int | None = None
    optimizer: str = "sgd"  # sgd | adamw (see parbench.contract.optim)
    lr: float | None = None  # default: OPTIMIZER_DEFAULTS of the optimizer
    lr_scaling: str = "none"  # none | linear (lr * global_batch / 128)
    momentum: float | None = None  # sgd (0.9)
    weight_decay: float | None = None  # default: OPTIMIZER_DEFAULTS of the optimizer
    beta1: float | None = None  # adamw (0.9)
    beta2: float | None = None  # adamw (0.999)
    eps: float | None = None  # adamw (1e-8)
    clip_grad_norm: float | None = None  # clip the global-batch gradient's norm to this
    schedule: str = "cosine"
    warmup_steps: int = 0
    seed: int = 0
    repeats: int = 1
    threads: int | None = None  # default: cores // processes, at least 1
    timeout: float = 900.0
    target_accuracy: float | None = None
    out: str = "results/runs"
    verbose: bool = False
    isolate_network: str = "auto"  # auto | on | off: the run's processes in a private netns
    profile: bool = False  # split steady steps into phases, run the framework's profiler
    modes: Modes = Modes()  # precision, compile, ...: parbench.run.modes.MODES, flat in files
    train_subset: int | None = None  # train on the first N training samples
    nnodes: int = 1  # machines; --devices is then per node (see parbench.launch.nodes)
    node_rank: int = 0  # this machine's index among them
    master: str | None = None  # HOST:PORT of node 0: the rendezvous; PORT+1 parbench's check-in
    ifname: str | None = None  # the collectives' interface (default lo for a loopback master)
    join_timeout: float = 300.0  # seconds the nodes wait for each other to check in

    @classmethod
    def of(cls, **values) -> RunConfig:
        """From flat keys, as config files, the command line and records spell them: a mode's
        key (``precision``, ``grad_accum``, ...) goes into ``modes``."""
        modes = {key: values.pop(key) for key in list(values) if key in MODES}
        return cls(**values, modes=Modes(**modes))

    def as_dict(self) -> dict:
        """Flat keys, the modes among the other options: the record's ``config``."""
        flat = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "modes"}
        return {**flat, **self.modes.as_dict()}


@dataclass(frozen=True)
class Plan:
    backend: Backend
    launcher: str
    world_size: int  # every node's devices together
    global_batch: int
    per_device_batch: int
    batch_mode: str  # global | per-device: which of the two the user fixed
    total_steps: int  # the contract's; --epochs with a native loader counts the loader's
    epochs: int | None  # None when --steps fixed the length
    threads: int
    optimizer: OptimizerSpec
    isolate_network: bool  # resolved: the launcher starts in a namespace with only loopback
    profile: bool = False  # a profiled run: its own record name, never in performance tables
    modes: Modes = Modes()
    nodes: Nodes | None = None  # a multi-node run's settings; None on one machine

    @property
    def nnodes(self) -> int:
        return self.nodes.nnodes if self.nodes else 1

    @property
    def devices_per_node(self) -> int:
        return self.world_size // self.nnodes

    @property
    def processes_per_node(self) -> int:
        return 1 if self.backend.one_process else self.devices_per_node


def read_config_file(path: str) -> dict:
    """Keys of a TOML or JSON config file; unknown keys are an error."""
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"config file not found: {path}")
    try:
        text = file.read_text()
        data = json.loads(text) if file.suffix == ".json" else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as err:
        raise UsageError(f"config file {path} is not valid {file.suffix[1:] or 'TOML'}: {err}")
    known = {f.name for f in fields(RunConfig)} - {"modes"} | set(MODES)
    unknown = sorted(set(data) - known)
    if unknown:
        raise UsageError(f"config file {path}: unknown key(s) {', '.join(unknown)}")
    hints = get_type_hints(RunConfig) | {name: mode.kind for name, mode in MODES.items()}
    for key, value in data.items():
        allowed = tuple(t for t in (get_args(hints[key]) or (hints[key],)) if t is not NoneType)
        if float in allowed:
            allowed += (int,)  # TOML writes 1 for 1.0
        if isinstance(value, bool) and bool not in allowed or not isinstance(value, allowed):
            names = " or ".join(t.__name__ for t in allowed)
            raise UsageError(f"config file {path}: {key} must be {names}, got {value!r}")
    return data


def _available_devices(backend: Backend) -> tuple[int, str]:
    gpus = gpu_count()
    if gpus:
        return gpus, "GPUs"
    if backend.gpu_for_parallel:
        return 1, "CUDA devices (none found; on CPU it is a no-op that runs on one device)"
    return cpu_count(), "CPU cores"


def _world_size(cfg: RunConfig, backend: Backend) -> int:
    devices = cfg.devices if cfg.devices is not None else (2 if backend.parallel else 1)
    if devices < 1:
        raise UsageError(f"--devices must be at least 1, got {devices}")
    if devices > 1 and not backend.parallel:
        raise UsageError(f"{backend.name} runs on one device; use --devices 1")
    limit, what = _available_devices(backend)
    if devices > limit:
        hint = f" ({backend.gpu_for_parallel})" if backend.gpu_for_parallel else ""
        raise UsageError(f"{backend.name}: --devices {devices} but this machine has {limit} "
                         f"{what}{hint}")
    return devices


def _batches(cfg: RunConfig, world: int, devices_text: str) -> tuple[int, int, str]:
    if cfg.global_batch is not None and cfg.per_device_batch is not None:
        raise UsageError("give --global-batch or --per-device-batch, not both")
    if cfg.per_device_batch is not None:
        if cfg.per_device_batch < 1:
            raise UsageError(f"--per-device-batch must be positive, got {cfg.per_device_batch}")
        return cfg.per_device_batch * world, cfg.per_device_batch, "per-device"
    batch = 128 if cfg.global_batch is None else cfg.global_batch
    if batch < 1:
        raise UsageError(f"--global-batch must be positive, got {batch}")
    if batch % world:
        raise UsageError(f"--global-batch {batch} is not divisible by {devices_text}")
    return batch, batch // world, "global"


def _check_choices(cfg: RunConfig) -> None:
    for value, choices, option in ((cfg.dataset, DATASET_NAMES, "--dataset"),
                                   (cfg.model, MODEL_NAMES, "--model"),
                                   (cfg.schedule, SCHEDULES, "--schedule"),
                                   (cfg.lr_scaling, ("none", "linear"), "--lr-scaling"),
                                   (cfg.isolate_network, ISOLATION_CHOICES,
                                    "--isolate-network"),
                                   (cfg.optimizer, OPTIMIZERS, "--optimizer")):
        if value not in choices:
            raise UsageError(f"{option} {value!r} is not one of {', '.join(choices)}")
    task = task_of_model(cfg.model)
    if task is not task_of_dataset(cfg.dataset):
        raise UsageError(f"--model {cfg.model} is a {task.name} model; --dataset {cfg.dataset} "
                         f"is not {task.name} data (its datasets: {', '.join(task.datasets)})")
    if cfg.dataset in NEEDS_DATA_DIR and cfg.data_dir is None:
        raise UsageError(f"--dataset {cfg.dataset} needs --data-dir")
    if cfg.data_dir is not None and not os.path.isdir(cfg.data_dir):
        raise UsageError(f"--data-dir {cfg.data_dir} does not exist or is not a directory")
    for value, option in ((cfg.repeats, "--repeats"), (cfg.timeout, "--timeout"),
                          (cfg.lr, "--lr"), (cfg.eps, "--eps"),
                          (cfg.clip_grad_norm, "--clip-grad-norm")):
        if value is not None and value <= 0:
            raise UsageError(f"{option} must be positive, got {value}")
    if cfg.epochs is not None and cfg.steps is not None:
        raise UsageError("give --epochs or --steps, not both")
    if cfg.train_subset is not None and cfg.train_subset < 1:
        raise UsageError(f"--train-subset must be positive, got {cfg.train_subset}")


def _isolation(choice: str, nodes: Nodes | None) -> bool:
    if choice == "off":
        return False
    if nodes is not None:
        if choice == "on":
            raise UsageError("--isolate-network on cannot work for a multi-node run: its "
                             "nodes reach each other over the network")
        return False
    unavailable = private_network_unavailable()
    if choice == "on" and unavailable:
        raise UsageError(f"--isolate-network on is impossible here: {unavailable}")
    return unavailable is None


def resolve(cfg: RunConfig, train_size: int | None = None) -> Plan:
    """Check ``cfg`` and derive the plan; ``train_size`` is needed to turn epochs into steps."""
    if cfg.backend not in BACKENDS:
        raise UsageError(f"unknown backend {cfg.backend!r}; choose one of {', '.join(BACKENDS)}")
    backend = BACKENDS[cfg.backend]
    _check_choices(cfg)
    launcher = cfg.launcher or backend.launchers[0]
    if launcher not in backend.launchers:
        why = backend.launcher_refusals.get(launcher)
        raise UsageError(f"{backend.name} has no launcher {launcher!r}"
                         f"{f' ({why})' if why else ''}; it supports "
                         f"{', '.join(backend.launchers)}")
    if cfg.profile and backend.profile_refusal:
        raise UsageError(f"--profile is not available for {backend.name}: "
                         f"{backend.profile_refusal}")
    try:
        nodes = resolve_nodes(cfg.nnodes, cfg.node_rank, cfg.master, cfg.ifname,
                              cfg.join_timeout, backend, launcher)
    except NodesError as err:
        raise UsageError(str(err)) from None
    per_node = _world_size(cfg, backend)
    world = per_node * (nodes.nnodes if nodes else 1)
    devices_text = f"{world} devices ({nodes.nnodes} nodes x --devices {per_node})" if nodes \
        else f"--devices {world}"
    global_batch, per_device, mode = _batches(cfg, world, devices_text)
    modes = _modes(cfg, backend, world, per_device)
    if cfg.profile and modes.changed():
        raise UsageError(f"--profile splits the fp32 eager step into phases; it cannot be "
                         f"combined with --{next(iter(modes.changed())).replace('_', '-')}")
    processes = 1 if backend.one_process else per_node
    threads = cfg.threads if cfg.threads is not None else max(1, cpu_count() // processes)
    if threads < 1:
        raise UsageError(f"--threads must be at least 1, got {threads}")
    steps, epochs = cfg.steps, None if cfg.steps is not None else (cfg.epochs or 2)
    if train_size is not None and train_size < global_batch:
        raise UsageError(f"global batch {global_batch} exceeds the {train_size} training "
                         "samples")
    if steps is None and train_size is not None:
        steps = epochs * (train_size // global_batch)
    if steps is not None and steps < 1:
        raise UsageError(f"--steps/--epochs must give at least 1 step, got {steps}")
    optimizer = _optimizer(cfg, global_batch)
    return Plan(backend, launcher, world, global_batch, per_device, mode, steps or 0, epochs,
                threads, optimizer, _isolation(cfg.isolate_network, nodes), cfg.profile, modes,
                nodes)


def _modes(cfg: RunConfig, backend: Backend, devices: int, per_device_batch: int) -> Modes:
    modes = cfg.modes
    why = refusal(backend, modes, gpu_count(), uses_batchnorm(cfg.model), devices,
                  per_device_batch)
    if why:
        raise UsageError(why)
    return modes


def optimizer_settings(cfg: RunConfig) -> dict:
    """The optimizer's settings: the user's, else its defaults (lr before any scaling)."""
    defaults = OPTIMIZER_DEFAULTS[cfg.optimizer]
    for name, values in OPTIMIZER_DEFAULTS.items():
        for key in sorted(set(values) - set(defaults)):
            if getattr(cfg, key) is not None:
                raise UsageError(f"--{key.replace('_', '-')} is an option of --optimizer "
                                 f"{name}, not of {cfg.optimizer}")
    settings = {key: default if getattr(cfg, key) is None else getattr(cfg, key)
                for key, default in defaults.items()}
    for key in ("beta1", "beta2"):
        if key in settings and not 0 <= settings[key] < 1:
            raise UsageError(f"--{key} must be in [0, 1), got {settings[key]}")
    return settings


def _optimizer(cfg: RunConfig, global_batch: int) -> OptimizerSpec:
    settings = optimizer_settings(cfg)
    settings["lr"] = scaled_lr(settings["lr"], global_batch, cfg.lr_scaling)
    return OptimizerSpec(schedule=cfg.schedule, warmup_steps=cfg.warmup_steps,
                         name=cfg.optimizer, clip_grad_norm=cfg.clip_grad_norm, **settings)
