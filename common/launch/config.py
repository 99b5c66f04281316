"""What a user asks for (RunConfig) and what it resolves to (Plan), with every check that must
fail before anything is launched or written."""

from __future__ import annotations

import json
import os
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from types import NoneType
from typing import get_args, get_type_hints

from parbench.base.devices import cpu_count, gpu_count
from parbench.base.errors import Unavailable, UsageError
from parbench.contract.data import DATASET_NAMES, NEEDS_DATA_DIR
from parbench.contract.language import LANGUAGE_DATASETS
from parbench.contract.optim import OPTIMIZERS, SCHEDULES, OptimizerSpec, scaled_lr
from parbench.contract.spec import MODEL_NAMES, build_spec, uses_batchnorm
from parbench.contract.tasks import task_of_dataset, task_of_model
from parbench.run.modes import MODES, Modes, input_problem, refusal
from parbench.run.registry import BACKENDS, Backend

from .bounds import (
    ACCURACY,
    AT_LEAST_ONE,
    CONTEXT,
    MODEL_SIZE,
    NON_NEGATIVE,
    POSITIVE,
    SEED,
    UNIT_INTERVAL,
    VOCABULARY,
    bounded,
    problems,
)
from .netns import private_network_unavailable
from .nodes import Nodes, NodesError, resolve_nodes

ISOLATION_CHOICES = ("auto", "on", "off")
DATASETS = (*DATASET_NAMES, *LANGUAGE_DATASETS)
MODEL_SIZES = ("width", "depth", "heads")
NEEDS_DATA_FILE = ("text",)  # --data-dir is the file itself


# What an optimizer option means when not given; an option of the other optimizer is an error.
OPTIMIZER_DEFAULTS = {
    "sgd": {"lr": 0.1, "weight_decay": 5e-4, "momentum": 0.9},
    "adamw": {"lr": 1e-3, "weight_decay": 0.05, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8},
}


@dataclass
class RunConfig:
    backend: str = next(iter(BACKENDS))  # the registry's first framework's single backend
    devices: int | None = bounded(None, AT_LEAST_ONE)  # default: 2 if parallel, else 1
    launcher: str | None = None  # default: the backend's first launcher
    dataset: str | None = None  # default: the model's task's (synthetic; markov for gpt)
    data_dir: str | None = None  # a dataset's folder; --dataset text: the text file
    model: str = "resnet"
    context: int | None = bounded(None, CONTEXT)  # token datasets: tokens a row reads (64)
    vocab: int | None = bounded(None, VOCABULARY)  # --dataset markov: its tokens (64)
    width: int | None = bounded(None, MODEL_SIZE)  # --model gpt's sizes (64, 2 blocks, 4
    depth: int | None = bounded(None, MODEL_SIZE)  # heads; see parbench.contract.spec)
    heads: int | None = bounded(None, MODEL_SIZE)
    epochs: int | None = bounded(None, AT_LEAST_ONE)  # default 2 when neither is given
    steps: int | None = bounded(None, AT_LEAST_ONE)
    global_batch: int | None = bounded(None, POSITIVE)  # default 128 when neither is given
    per_device_batch: int | None = bounded(None, POSITIVE)
    optimizer: str | None = None  # sgd | adamw (see parbench.contract.optim); default: the
    # model's task's (sgd for the image models, adamw for gpt)
    lr: float | None = bounded(None, POSITIVE)  # default: OPTIMIZER_DEFAULTS
    lr_scaling: str = "none"  # none | linear (lr * global_batch / 128)
    momentum: float | None = bounded(None, UNIT_INTERVAL)  # sgd (0.9)
    weight_decay: float | None = bounded(None, NON_NEGATIVE)  # default: OPTIMIZER_DEFAULTS
    beta1: float | None = bounded(None, UNIT_INTERVAL)  # adamw (0.9)
    beta2: float | None = bounded(None, UNIT_INTERVAL)  # adamw (0.999)
    eps: float | None = bounded(None, POSITIVE)  # adamw (1e-8)
    clip_grad_norm: float | None = bounded(None, POSITIVE)  # clip the global gradient's norm
    schedule: str = "cosine"
    warmup_steps: int = bounded(0, NON_NEGATIVE)  # at most the run's steps
    seed: int = bounded(0, SEED)
    repeats: int = bounded(1, POSITIVE)
    threads: int | None = bounded(None, AT_LEAST_ONE)  # default: cores // processes
    timeout: float = bounded(900.0, POSITIVE)
    target_accuracy: float | None = bounded(None, ACCURACY)
    out: str = "results/runs"
    verbose: bool = False
    isolate_network: str = "auto"  # auto | on | off: the run's processes in a private netns
    profile: bool = False  # split steady steps into phases, run the framework's profiler
    modes: Modes = Modes()  # precision, compile, ...: parbench.run.modes.MODES, flat in files
    train_subset: int | None = bounded(None, POSITIVE)  # the first N training samples
    nnodes: int = bounded(1, AT_LEAST_ONE)  # machines; --devices is then per node (nodes.py)
    node_rank: int = bounded(0, NON_NEGATIVE)  # this machine's index among them
    master: str | None = None  # HOST:PORT of node 0: the rendezvous; PORT+1 parbench's check-in
    ifname: str | None = None  # the collectives' interface (default lo for a loopback master)
    join_timeout: float = bounded(300.0, POSITIVE)  # seconds nodes wait for each other

    def __post_init__(self) -> None:
        """What is not given takes the default of the model's task (an unknown model is
        refused later, by resolve)."""
        try:
            task = task_of_model(self.model)
        except ValueError:
            return
        self.dataset = task.default_dataset if self.dataset is None else self.dataset
        self.optimizer = task.default_optimizer if self.optimizer is None else self.optimizer

    @classmethod
    def of(cls, **values) -> RunConfig:
        """From flat keys, as config files, the command line and records spell them: a mode's
        key (``precision``, ``grad_accum``, ...) goes into ``modes``."""
        modes = {key: values.pop(key) for key in list(values) if key in MODES}
        return cls(**values, modes=Modes(**modes))

    def model_sizes(self) -> dict[str, int]:
        """The model sizes given (--width, --depth, --heads): what replaces the spec's."""
        return {name: getattr(self, name) for name in MODEL_SIZES if getattr(self, name)}

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
    if file.suffix not in (".toml", ".json"):
        raise UsageError(f"config file {path}: give a .toml or .json file")
    try:
        text = file.read_text()
        data = json.loads(text) if file.suffix == ".json" else tomllib.loads(text)
    except OSError as err:
        raise UsageError(f"config file {path}: cannot read it ({err.strerror or err})") from None
    except (ValueError, tomllib.TOMLDecodeError) as err:
        raise UsageError(f"config file {path} is not valid {file.suffix[1:].upper()}: "
                         f"{' '.join(str(err).split())}") from None
    if not isinstance(data, dict):
        raise UsageError(f"config file {path}: want a table of keys, got {type(data).__name__}")
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
    if backend.gpu_only and not gpu_count():
        raise Unavailable(f"{backend.name} {backend.missing_reason()}")
    devices = cfg.devices if cfg.devices is not None else (2 if backend.parallel else 1)
    if devices > 1 and not backend.parallel:
        raise UsageError(f"{backend.name} runs on one device; use --devices 1")
    limit, what = _available_devices(backend)
    if devices > limit:
        hint = f" ({backend.gpu_for_parallel})" if backend.gpu_for_parallel else ""
        raise Unavailable(f"{backend.name}: --devices {devices} but this machine has {limit} "
                         f"{what}{hint}")
    return devices


def _batches(cfg: RunConfig, world: int, devices_text: str) -> tuple[int, int, str]:
    if cfg.global_batch is not None and cfg.per_device_batch is not None:
        raise UsageError("give --global-batch or --per-device-batch, not both")
    if cfg.per_device_batch is not None:
        return cfg.per_device_batch * world, cfg.per_device_batch, "per-device"
    batch = 128 if cfg.global_batch is None else cfg.global_batch
    if batch % world:
        raise UsageError(f"--global-batch {batch} is not divisible by {devices_text}")
    return batch, batch // world, "global"


def _check_choices(cfg: RunConfig) -> None:
    # the model first: an unknown one leaves the dataset and optimizer without a default
    for value, choices, option in ((cfg.model, MODEL_NAMES, "--model"),
                                   (cfg.dataset, DATASETS, "--dataset"),
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
    _check_data_options(cfg)
    if cfg.model_sizes():  # sizes of another model, or that make none, before any data
        try:
            build_spec(cfg.model, (1,), 2, cfg.model_sizes())
        except ValueError as err:
            raise UsageError(str(err)) from None
    if cfg.epochs is not None and cfg.steps is not None:
        raise UsageError("give --epochs or --steps, not both")


def _check_data_options(cfg: RunConfig) -> None:
    if cfg.dataset in NEEDS_DATA_FILE:
        if cfg.data_dir is None:
            raise UsageError(f"--dataset {cfg.dataset} needs --data-dir PATH: a UTF-8 text file")
        if not os.path.isfile(cfg.data_dir):
            raise UsageError(f"--data-dir {cfg.data_dir} does not exist or is not a file")
    elif cfg.dataset in NEEDS_DATA_DIR and cfg.data_dir is None:
        raise UsageError(f"--dataset {cfg.dataset} needs --data-dir")
    elif cfg.data_dir is not None and not os.path.isdir(cfg.data_dir):
        raise UsageError(f"--data-dir {cfg.data_dir} does not exist or is not a directory")
    for option in ("context", "vocab"):
        if getattr(cfg, option) is not None and cfg.dataset not in LANGUAGE_DATASETS:
            raise UsageError(f"--{option} is an option of the token datasets "
                             f"({', '.join(LANGUAGE_DATASETS)}), not of --dataset {cfg.dataset}")
    if cfg.vocab is not None and cfg.dataset == "text":
        raise UsageError("--vocab is the synthetic language's; --dataset text has byte tokens "
                         "(vocabulary 256)")


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
    found = problems(cfg.as_dict(), fields(RunConfig))
    if found:
        raise UsageError(found[0])
    _check_choices(cfg)
    launcher = cfg.launcher or backend.launchers[0]
    if launcher not in backend.launchers:
        why = backend.launcher_refusals.get(launcher)
        raise Unavailable(f"{backend.name} has no launcher {launcher!r}"
                         f"{f' ({why})' if why else ''}; it supports "
                         f"{', '.join(backend.launchers)}")
    if cfg.profile and backend.profile_refusal:
        raise Unavailable(f"--profile is not available for {backend.name}: "
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
    steps, epochs = cfg.steps, None if cfg.steps is not None else (cfg.epochs or 2)
    if train_size is not None and train_size < global_batch:
        raise UsageError(f"global batch {global_batch} exceeds the {train_size} training "
                         f"rows of --dataset {cfg.dataset}")
    if steps is None and train_size is not None:
        steps = epochs * (train_size // global_batch)
    if steps is not None and steps < 1:
        raise UsageError(f"--steps/--epochs must give at least 1 step, got {steps}")
    if steps is not None and cfg.warmup_steps > steps:
        raise UsageError(f"--warmup-steps {cfg.warmup_steps} exceeds the run's {steps} steps")
    optimizer = _optimizer(cfg, global_batch)
    return Plan(backend, launcher, world, global_batch, per_device, mode, steps or 0, epochs,
                threads, optimizer, _isolation(cfg.isolate_network, nodes), cfg.profile, modes,
                nodes)


def _modes(cfg: RunConfig, backend: Backend, devices: int, per_device_batch: int) -> Modes:
    wrong = input_problem(cfg.modes, uses_batchnorm(cfg.model), per_device_batch)
    if wrong:
        raise UsageError(wrong)
    why = refusal(backend, cfg.modes, gpu_count(), devices)
    clip_refused = backend.refusals.get("clip_grad_norm")
    if not why and cfg.clip_grad_norm is not None and clip_refused:
        why = f"--clip-grad-norm is not available for {backend.name}: {clip_refused}"
    if why:
        raise Unavailable(why)
    return cfg.modes


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
    return settings


def _optimizer(cfg: RunConfig, global_batch: int) -> OptimizerSpec:
    settings = optimizer_settings(cfg)
    settings["lr"] = scaled_lr(settings["lr"], global_batch, cfg.lr_scaling)
    return OptimizerSpec(schedule=cfg.schedule, warmup_steps=cfg.warmup_steps,
                         name=cfg.optimizer, clip_grad_norm=cfg.clip_grad_norm, **settings)
