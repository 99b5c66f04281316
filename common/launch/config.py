"""What a user's RunConfig (parbench.launch.options) resolves to (Plan), with every check that
must fail before anything is launched or written."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from parbench.base.devices import cpu_count, gpu_count
from parbench.base.errors import Unavailable, UsageError
from parbench.base.options import problems
from parbench.contract.optim import OptimizerSpec, scaled_lr
from parbench.contract.spec import build_spec, uses_batchnorm
from parbench.contract.tasks import TASKS, Target, Task, task_of_dataset, task_of_model
from parbench.run.modes import Modes, input_problem, refusal
from parbench.run.registry import BACKENDS, Backend

from .checkpoints import Resume
from .checkpoints import check_options as check_checkpoints
from .netns import private_network_unavailable
from .nodes import Nodes, NodesError, resolve_nodes
from .options import DEFAULT_EPOCHS, OPTIONS, RunConfig

# What an optimizer option means when not given; an option of the other optimizer is an error.
OPTIMIZER_DEFAULTS = {
    "sgd": {"lr": 0.1, "weight_decay": 5e-4, "momentum": 0.9},
    "adamw": {"lr": 1e-3, "weight_decay": 0.05, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8},
}


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
    target: Target | None = None  # --target's figure: the run stops when it reaches the value
    eval_every: int | None = None  # steps between evaluations (None: at every epoch's end)
    checkpoint_every: int | None = None  # --checkpoint-every (parbench.run.checkpoint)
    resume: Resume | None = None  # the checkpoint it resumes from, checked (set by prepare)

    @property
    def nnodes(self) -> int:
        return self.nodes.nnodes if self.nodes else 1

    @property
    def devices_per_node(self) -> int:
        return self.world_size // self.nnodes

    @property
    def processes_per_node(self) -> int:
        return 1 if self.backend.one_process else self.devices_per_node


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
    """The model and dataset belong to one task, each option given belongs to them, and the
    model's sizes make a model, before any data is read."""
    task = task_of_model(cfg.model)
    if task is not task_of_dataset(cfg.dataset):
        raise UsageError(f"--model {cfg.model} is a model of {task.name}; --dataset "
                         f"{cfg.dataset} is not {task.name} data (its datasets: "
                         f"{', '.join(task.datasets)})")
    _check_owned_options(cfg, task)
    _check_data_path(cfg, task)
    if cfg.model_sizes():  # sizes of another model, or that make none, before any data
        try:
            build_spec(cfg.model, task.probe_input, 2, cfg.model_sizes())
        except ValueError as err:
            raise UsageError(str(err)) from None
    if cfg.epochs is not None and cfg.steps is not None:
        raise UsageError("give --epochs or --steps, not both")


def _target(cfg: RunConfig) -> Target | None:
    """--target's figure, checked against the task's targets and the figure's range."""
    if cfg.target is None:
        if cfg.target_metric is not None:
            raise UsageError(f"--target-metric {cfg.target_metric} names what --target is of; "
                             "give --target VALUE too")
        return None
    try:
        target = task_of_model(cfg.model).target_of(cfg.target_metric)
    except ValueError as err:
        raise UsageError(str(err)) from None
    wrong = target.bounds.problem("--target", cfg.target)
    if wrong:
        raise UsageError(f"{wrong} (a target of {target.metric}, {target.unit})")
    return target


def _check_owned_options(cfg: RunConfig, task: type[Task]) -> None:
    """An option of a task is refused for another task's dataset (one of a model, by
    build_spec)."""
    for option in OPTIONS.values():
        owner = option.owner.removeprefix("task ")
        if owner != option.owner and owner != task.name and getattr(cfg, option.name) is not None:
            other = TASKS[owner]
            raise UsageError(f"{option.flag} is an option of the {other.data_kind} "
                             f"({', '.join(other.datasets)}), not of --dataset {cfg.dataset}")
    wrong = task.option_problem(cfg.dataset, {o.name: getattr(cfg, o.name) for o in task.options})
    if wrong:
        raise UsageError(wrong)


def _check_data_path(cfg: RunConfig, task: type[Task]) -> None:
    """--data-dir where the dataset needs one: a folder, or a file (the dataset's own)."""
    needs = task.data_paths.get(cfg.dataset)
    if needs == "file":
        if cfg.data_dir is None:
            raise UsageError(f"--dataset {cfg.dataset} needs --data-dir PATH: a UTF-8 text file")
        if not os.path.isfile(cfg.data_dir):
            raise UsageError(f"--data-dir {cfg.data_dir} does not exist or is not a file")
    elif needs == "folder" and cfg.data_dir is None:
        raise UsageError(f"--dataset {cfg.dataset} needs --data-dir")
    elif cfg.data_dir is not None and not os.path.isdir(cfg.data_dir):
        raise UsageError(f"--data-dir {cfg.data_dir} does not exist or is not a directory")


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
    found = problems(cfg.as_dict(), OPTIONS.values())
    if found:
        raise UsageError(found[0])
    _check_choices(cfg)
    launcher = cfg.launcher or backend.launchers[0]
    if launcher not in backend.launchers:
        why = backend.launcher_refusals.get(launcher)
        raise Unavailable(f"{backend.name} has no launcher {launcher!r}"
                         f"{f' ({why})' if why else ''}; it supports "
                         f"{', '.join(backend.launchers)}")
    check_checkpoints(cfg, backend)
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
    epochs = None if cfg.steps is not None else (cfg.epochs or DEFAULT_EPOCHS)
    if cfg.steps is not None and cfg.warmup_steps > cfg.steps:
        raise UsageError(f"--warmup-steps {cfg.warmup_steps} exceeds the run's {cfg.steps} "
                         "steps")
    optimizer = _optimizer(cfg, global_batch)
    plan = Plan(backend, launcher, world, global_batch, per_device, mode, cfg.steps or 0, epochs,
                threads, optimizer, _isolation(cfg.isolate_network, nodes), cfg.profile, modes,
                nodes, _target(cfg), cfg.eval_every, cfg.checkpoint_every)
    return plan if train_size is None else sized(plan, cfg, train_size)


def sized(plan: Plan, cfg: RunConfig, train_size: int) -> Plan:
    """``plan`` for a dataset of ``train_size`` training rows: --epochs become steps, and the
    checks that need the data's size (the batch fits, at least one step, warm-up within it)."""
    if train_size < plan.global_batch:
        raise UsageError(f"global batch {plan.global_batch} exceeds the {train_size} training "
                         f"rows of --dataset {cfg.dataset}")
    steps = cfg.steps if cfg.steps is not None \
        else plan.epochs * (train_size // plan.global_batch)
    if steps < 1:
        raise UsageError(f"--steps/--epochs must give at least 1 step, got {steps}")
    if cfg.warmup_steps > steps:
        raise UsageError(f"--warmup-steps {cfg.warmup_steps} exceeds the run's {steps} steps")
    if plan.eval_every is not None and plan.eval_every > steps:
        raise UsageError(f"--eval-every {plan.eval_every} exceeds the run's {steps} steps: it "
                         "would evaluate only at the end")
    return replace(plan, total_steps=steps)


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
