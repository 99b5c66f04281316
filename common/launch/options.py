"""The option table and RunConfig: what a user asks for.

RunConfig's fields are the option table (``OPTIONS``): the run's own options below, the
model's (parbench.contract.spec), each task's (parbench.contract.tasks) and the optimizer's
(parbench.contract.optim), each declared once by its owner (parbench.base.options), and the
modes (parbench.run.modes) as one field. The table is read when this module is imported, so a
task or option added before then (from its own module) is part of it."""

from __future__ import annotations

import json
import tomllib
from dataclasses import field, fields, make_dataclass
from pathlib import Path

from parbench.base.errors import UsageError
from parbench.base.options import AT_LEAST_ONE, NON_NEGATIVE, POSITIVE, SEED, Bounds, Option
from parbench.contract.optim import OPTIMIZER_OPTIONS
from parbench.contract.spec import MODEL_OPTIONS
from parbench.contract.tasks import (
    TASKS,
    Task,
    all_datasets,
    check_models,
    preset_names,
    target_metrics,
    task_of_model,
    task_options,
    with_task_defaults,
)
from parbench.run.modes import MODES, Modes
from parbench.run.registry import BACKENDS

ISOLATION_CHOICES = ("auto", "on", "off")
NODES = "multi-node"  # the section of run's --help that holds the multi-node options
DEFAULT_EPOCHS = 2  # a run's budget where neither --steps, --epochs nor the task's recipe sets it
DEFAULT_TASK = task_of_model(MODEL_OPTIONS[0].default)  # the task of a run that names no model


# The help of the options whose values are the tasks' (datasets, targets, recipes, presets),
# written from the task table, so a task added from its own module is named there too.
def _tasks_text(task: type[Task]) -> str:
    """How --help names a task: by its data, and the model that picks it where not default."""
    return task.data_kind + ("" if task is DEFAULT_TASK else
                             f" (--model {' or '.join(task.models)})")


def _dataset_text(task: type[Task], dataset: str) -> str:
    """A dataset's name, with its task's default marked and its note, if any."""
    default = {task.default_dataset: "default" if task is DEFAULT_TASK else "its default"}
    notes = [n for n in (default.get(dataset), task.dataset_notes.get(dataset)) if n]
    return dataset + (f" ({', '.join(notes)})" if notes else "")


def _dataset_help() -> str:
    return "; ".join(f"{_tasks_text(task)}: "
                     + ", ".join(_dataset_text(task, d) for d in task.datasets)
                     for task in TASKS.values())


def _target_help() -> str:
    firsts = ", ".join(f"{t.metric} for {task.data_kind} ({t.unit}, {t.better} is better)"
                       for task in TASKS.values() for t in task.targets[:1])
    return ("stop at the first evaluation that reaches it, and record the time to it (as MLPerf "
            f"times training): the task's first figure, {firsts}; --target-metric picks "
            "another of the task's figures")


def _target_metric_help() -> str:
    return "the figure --target is of: " + "; ".join(
        f"{_either([t.metric for t in task.targets])} for {task.data_kind}"
        for task in TASKS.values() if task.targets)


def _either(names: list[str]) -> str:
    return " or ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)


def _flags(values: dict[str, object]) -> str:
    """Option values as the command line spells them."""
    return " ".join(f"--{key.replace('_', '-')} {value}" for key, value in values.items())


def _epochs_help() -> str:
    recipes = "".join(
        f"; {task.data_kind}: {task.recipe['epochs']}, their recipe with "
        f"{_flags({k: v for k, v in task.recipe.items() if k != 'epochs'})}"
        for task in TASKS.values() if "epochs" in task.recipe)
    return f"training epochs (default {DEFAULT_EPOCHS}{recipes})"


def _preset_help() -> str:
    return ("a size the task names, filling in what is not given (each task's presets and why: "
            f"parbench.contract.tasks): {'; '.join(_preset_text(n) for n in preset_names())}")


def _preset_text(name: str) -> str:
    """A preset and what it fills in for each task that has it."""
    filled = [f"{task.data_kind}: {_flags(task.presets[name])}" for task in TASKS.values()
              if name in task.presets]
    return f"{name} ({', '.join(filled)})"


_DATA = (
    Option("dataset", str, help=_dataset_help(), choices=all_datasets, inputs=True),
    Option("data_dir", str, help="folder with the dataset's official files (cifar10, mnist); "
           "--dataset text: the UTF-8 text file", inputs=True),
)
_BUDGET = (
    Option("epochs", int, help=_epochs_help(), bounds=AT_LEAST_ONE, exclusive="budget"),
    Option("steps", int, help="training steps instead of epochs", bounds=AT_LEAST_ONE,
           exclusive="budget"),
    Option("global_batch", int, help="samples per step, all devices (128)", bounds=POSITIVE,
           exclusive="batch"),
    Option("per_device_batch", int, help="samples per step per device", bounds=POSITIVE,
           exclusive="batch"),
)
_RUN = (
    Option("seed", int, 0, bounds=SEED, inputs=True),
    Option("repeats", int, 1, "independent runs of the configuration (1)", bounds=POSITIVE),
    Option("threads", int, help="compute threads per worker (cores / processes)",
           bounds=AT_LEAST_ONE),
    Option("timeout", float, 900.0, "seconds before a run is killed and recorded (900)",
           bounds=POSITIVE),
    Option("target", float, help=_target_help(), bounds=Bounds(), metavar="VALUE"),
    Option("target_metric", str, help=_target_metric_help(), choices=target_metrics),
    Option("eval_every", int, help="evaluate every N steps and at the end (default: at every "
           "epoch's end); a --target is checked at each evaluation", bounds=AT_LEAST_ONE,
           metavar="N"),
    Option("out", str, "results/runs", "folder for the records (results/runs)"),
    Option("verbose", bool, False, "let framework logs through"),
    Option("isolate_network", str, "auto", "run the processes in a private network namespace "
           "with only loopback up, so no rendezvous port is reachable from outside: auto "
           "(default: when the OS allows it), on (refuse to run otherwise), off",
           choices=ISOLATION_CHOICES),
    Option("profile", bool, False, "split up to 10 steady steps into forward/backward/optimizer/"
           "communication per rank and list the framework profiler's top operations, in "
           "<record>.profile.json; the record is marked and kept out of the performance tables"),
    Option("preset", str, help=_preset_help(), choices=preset_names, inputs=True),
    Option("train_subset", int, help="train on the first N training samples (an uneven size "
           "shows how each loader handles a tail)", bounds=POSITIVE, metavar="N", inputs=True),
)
CHECKPOINT_OPTIONS = (  # parbench.run.checkpoint; for 'parbench run' only
    Option("checkpoint_every", int, help="write the full training state every N steps, in the "
           "framework's own format, to --checkpoint-dir's step-N", bounds=AT_LEAST_ONE,
           metavar="N", commands=("run",)),
    Option("checkpoint_dir", str, help="the folder of --checkpoint-every's checkpoints",
           metavar="DIR", commands=("run",)),
    Option("resume_from", str, help="continue the run a checkpoint was written by: DIR/step-N, "
           "or DIR for its latest; same model, data, batch, steps, optimizer and seed",
           metavar="DIR", commands=("run",)),
)
_NODES = (  # parbench.launch.nodes, docs/multinode.md; a config file may hold them for compare
    Option("nnodes", int, 1, "machines in the run (1)", bounds=AT_LEAST_ONE,
           commands=("run",), section=NODES),
    Option("node_rank", int, 0, "this machine's index, 0 to nnodes-1; node 0 writes the "
           "record", bounds=NON_NEGATIVE, commands=("run",), section=NODES),
    Option("master", str, help="node 0's address: PORT is the framework's rendezvous, PORT+1 "
           "parbench's check-in", metavar="HOST:PORT", commands=("run",), section=NODES),
    Option("ifname", str, help="network interface of the collectives (GLOO_/NCCL_SOCKET_IFNAME;"
           " default lo when the master is a loopback address)", commands=("run",),
           section=NODES),
    Option("join_timeout", float, 300.0, "seconds the nodes wait for each other (300)",
           bounds=POSITIVE, commands=("run",), section=NODES),
)


def _launcher_help() -> str:
    return "; ".join(f"{b.name}: {' (default) or '.join(b.launchers)}"
                     for b in BACKENDS.values() if len(b.launchers) > 1)


# Tasks or models added from a module of their own are registered by now: every named model
# must still belong to exactly one task, or the model decides no task's defaults and options.
check_models()

# The option table, in the order of --help and of a record's ``config``. The backend and the
# device count are arguments each command spells its own way; every other option is a flag.
OPTIONS: dict[str, Option] = {option.name: option for option in (
    # the registry's first framework's single backend
    Option("backend", str, next(iter(BACKENDS)), commands=()),
    Option("devices", int, help="devices (processes or replicas); default 2 if parallel",
           bounds=AT_LEAST_ONE, commands=()),
    Option("launcher", str, help=_launcher_help()),
    *_DATA, *MODEL_OPTIONS[:1], *task_options(), *MODEL_OPTIONS[1:], *_BUDGET,
    *OPTIMIZER_OPTIONS, *_RUN, *CHECKPOINT_OPTIONS, *_NODES)}


class _RunConfigMethods:
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
        key (``precision``, ``grad_accum``, ...) goes into ``modes``; a ``preset`` and the
        task's recipe fill in their values where none is given (UsageError for a preset the
        model's task lacks)."""
        try:
            values = with_task_defaults(values, OPTIONS["model"].default)
        except ValueError as err:
            raise UsageError(str(err)) from None
        modes = {key: values.pop(key) for key in list(values) if key in MODES}
        return cls(**values, modes=Modes(**modes))

    def model_sizes(self) -> dict[str, int]:
        """The model sizes given (--width, --depth, --heads): what replaces the spec's."""
        return {o.name: getattr(self, o.name) for o in OPTIONS.values()
                if o.owner == "model" and getattr(self, o.name)}

    def inputs_key(self) -> tuple:
        """The values of every option that changes what prepare() writes: configurations with
        the same key train on the same data and initial weights."""
        return tuple(getattr(self, o.name) for o in OPTIONS.values() if o.inputs)

    def as_dict(self) -> dict:
        """Flat keys, the modes among the other options: the record's ``config``."""
        flat = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "modes"}
        return {**flat, **self.modes.as_dict()}


RunConfig = make_dataclass(
    "RunConfig",
    [(o.name, o.kind if o.default is not None else o.kind | None,
      field(default=o.default, metadata={"option": o})) for o in OPTIONS.values()]
    + [("modes", Modes, field(default=Modes()))],
    bases=(_RunConfigMethods,))
RunConfig.__module__ = __name__  # where pickle and reprs look for it
RunConfig.__doc__ = ("A run's options, one field per entry of OPTIONS (None: not given) and "
                     "the modes (precision, compile, ...: parbench.run.modes.MODES, flat in "
                     "files and records).")


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
    unknown = sorted(set(data) - set(OPTIONS) - set(MODES))
    if unknown:
        raise UsageError(f"config file {path}: unknown key(s) {', '.join(unknown)}")
    for key, value in data.items():
        # a mode's key is checked as an option of the mode's type would be
        option = OPTIONS.get(key) or Option(key, MODES[key].kind)
        wrong = option.type_problem(value)
        if wrong:
            raise UsageError(f"config file {path}: {wrong}")
    return data
