"""Run modes: how a backend computes (precision, compilation), what makes N devices train like
one (synchronized BatchNorm, gradient accumulation) and who feeds the steps (the input
pipeline), each declared once in MODES.

Everything about a mode derives from its entry: the command-line flag and its help, the config
file key and its type, the check of its value, its part of the row label and of the record
name, its column in the report (and in the headline), its entry in the record schema, and the
check that it took effect. Adding a mode is one entry here plus the framework code that
implements it (and a refusal in parbench.run.registry where a framework cannot).

Each mode is refused up front where a framework cannot do it (one line, exit 2: ``refusal``;
a value or combination wrong in itself: ``input_problem``),
and proven to have taken effect once it runs: after the first step every rank reports what it
observed (``Observed``), and ``check_observed`` fails the run when that contradicts the request.
Several of these modes are silent no-ops when misused (Paddle AMP on CPU, torch.compile around
a bare ``nn.Sequential`` under DDP, a BatchNorm left unconverted), which is why the check exists.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from .registry import BACKENDS, Backend

ModeValue = bool | int | str
PRECISIONS = ("fp32", "bf16", "fp16")
INPUTS = ("arrays", "native")
# The dtype the first layer's activations must have on the first step, per --precision.
COMPUTE_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
FIRST_SCHEMA = 3  # the record schema that introduced modes: every such record has its modes
RESHARDING = [backend.name for backend in BACKENDS.values() if backend.reshards]


@dataclass
class Observed:
    """What a rank saw its modes do on the first step, for the record and the check."""

    compute_dtype: str  # dtype of the first layer's output in the first training forward
    compiled_graphs: int | None = None  # graphs the compiler produced (None: not compiled)
    sync_bn_layers: int = 0  # BatchNorm layers that reduce statistics across replicas
    micro_batches: int = 1  # backward passes in the first optimizer step
    # --clip-grad-norm: steps so far whose global-batch gradient norm exceeded the limit
    # (None: the step does not clip)
    clipped_steps: int | None = None
    # sharded data parallelism: whether the first sharded unit held its shards again right
    # after its first training forward (None: nothing is sharded)
    resharded_after_forward: bool | None = None


@dataclass(frozen=True)
class Mode:
    """One run mode: its name is the config key, the job's and the record's; the flag is the
    name with dashes."""

    name: str
    default: ModeValue  # its type is the mode's type
    help: str  # the flag's help
    column: str  # the report's column
    label: Callable[[ModeValue], str]  # its part of the row label ("" when it adds nothing)
    choices: tuple[str, ...] = ()  # the values of a text mode
    minimum: int | None = None  # the lowest value of a number mode
    metavar: str | None = None
    since: int = FIRST_SCHEMA  # the record schema version that first carried it
    headline: bool = True  # one of the headline's columns (a row never mixes modes anyway)
    # False: one device computes the same with or without it (sync BN), so a 1-device
    # reference of a scaling efficiency need not share it
    matters_on_one_device: bool = True
    # the first step's evidence that it took effect: the problem, or None
    verify: Callable[[ModeValue, Observed], str | None] | None = None
    # the backends it means something for (None: every backend); elsewhere its cell is "-"
    applies: Callable[[Backend], bool] | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def kind(self) -> type:
        return type(self.default)

    def spelled(self, value: ModeValue) -> str:
        """How a user asks for it: '--compile', '--grad-accum 2'."""
        return self.flag if self.kind is bool else f"{self.flag} {value}"

    def problem(self, value: object) -> str | None:
        """What is wrong with ``value`` for this mode (a config file's or the command line's),
        or None."""
        if type(value) is not self.kind:
            return f"{self.flag} must be {self.kind.__name__}, got {value!r}"
        if self.choices and value not in self.choices:
            return f"{self.flag} {value!r} is not one of {', '.join(self.choices)}"
        if self.minimum is not None and value < self.minimum:
            least = "0 or more" if self.minimum == 0 else f"at least {self.minimum}"
            return f"{self.flag} must be {least}, got {value}"
        return None

    def cell(self, value: ModeValue, backend: Backend | None = None) -> str | int:
        """Its cell in the report: yes/no for a switch, the value otherwise, "-" on a backend
        it does not apply to."""
        if self.applies and backend and not self.applies(backend):
            return "-"
        if self.kind is bool:
            return "yes" if value else "no"
        return value

    def schema(self) -> dict:
        """Its entry in the record schema's ``modes``."""
        if self.choices:
            return {"enum": list(self.choices)}
        if self.kind is bool:
            return {"type": "boolean"}
        if self.kind is int:
            return {"type": "integer", **({} if self.minimum is None
                                          else {"minimum": self.minimum})}
        return {"type": "string"}

    def add_option(self, parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
        """Its flag; unset (None) when not given, so a config file's value can stand."""
        if self.kind is bool:
            parser.add_argument(self.flag, action="store_true", default=None, help=self.help)
        else:
            parser.add_argument(self.flag, type=self.kind, choices=self.choices or None,
                                metavar=self.metavar, help=self.help)


def _dtype_seen(precision: ModeValue, seen: Observed) -> str | None:
    expected = COMPUTE_DTYPES[str(precision)]
    if seen.compute_dtype == expected:
        return None
    return (f"--precision {precision} expects {expected} activations, the first layer "
            f"computed in {seen.compute_dtype}")


def _graphs_seen(compile_: ModeValue, seen: Observed) -> str | None:
    return "--compile compiled no graph: the step ran eagerly" \
        if compile_ and not seen.compiled_graphs else None


def _sync_seen(sync_bn: ModeValue, seen: Observed) -> str | None:
    return "--sync-bn converted no BatchNorm layer" if sync_bn and not seen.sync_bn_layers \
        else None


def _micro_batches_seen(grad_accum: ModeValue, seen: Observed) -> str | None:
    if seen.micro_batches == grad_accum:
        return None
    return f"--grad-accum {grad_accum} ran {seen.micro_batches} micro-batch(es) in the first step"


def _reshard_seen(reshard: ModeValue, seen: Observed) -> str | None:
    if seen.resharded_after_forward is None or seen.resharded_after_forward == (reshard == "yes"):
        return None
    state = "its shards" if seen.resharded_after_forward else "the gathered parameters"
    return (f"--reshard-after-forward {reshard} but the first sharded layer held {state} after "
            "its forward")


MODES: dict[str, Mode] = {mode.name: mode for mode in (
    Mode("precision", "fp32", "fp32 (default); bf16 or fp16: autocast / mixed-precision policy "
         "(fp16 with loss scaling); the record states the dtype the first layer really "
         "computed in", "precision", label=str, choices=PRECISIONS, verify=_dtype_seen),
    Mode("compile", False, "each framework's compiler (see docs/porting.md section 14); the "
         "first step holds the compile time, steady-state figures exclude it", "compile",
         label=lambda on: "compile" if on else "", verify=_graphs_seen),
    Mode("sync_bn", False, "BatchNorm statistics over the global batch instead of each "
         "device's shard", "sync BN", label=lambda on: "sync-bn" if on else "",
         matters_on_one_device=False, verify=_sync_seen),
    Mode("grad_accum", 1, "K micro-batches per optimizer step, same global batch, gradients "
         "communicated once per step (1)", "grad accum", minimum=1, metavar="K",
         label=lambda k: f"accum{k}" if k != 1 else "", verify=_micro_batches_seen),
    Mode("input", "arrays", "arrays (default): parbench slices the contract's shards; native: "
         "each framework's own loader and sharding (docs/porting.md section 15); the record "
         "shows which samples each device trained on", "input", choices=INPUTS, since=4,
         headline=False, label=lambda feed: "native" if feed == "native" else ""),
    Mode("loader_workers", 0, "--input native: the loader's worker processes, where the "
         "framework's loader has them (0)", "loader workers", minimum=0, metavar="N", since=4,
         headline=False, label=lambda n: f"workers{n}" if n else ""),
    Mode("reshard_after_forward", "yes", "sharded backends: yes (default) frees each layer's "
         "gathered parameters after its forward and gathers them again for the backward "
         "(ZeRO-3); no keeps them until the backward (ZeRO-2-like: one gather, more memory)",
         "reshard", choices=("yes", "no"), since=8, headline=False,
         label=lambda value: "" if value == "yes" else "noreshard", verify=_reshard_seen,
         applies=lambda backend: backend.reshards),
)}


class Modes:
    """The value of every mode of MODES for one run (the default where none was given);
    immutable, comparable and hashable, so rows can be keyed by it."""

    def __init__(self, **values: ModeValue):
        unknown = sorted(set(values) - set(MODES))
        if unknown:
            raise TypeError(f"unknown mode(s) {', '.join(unknown)}; known: {', '.join(MODES)}")
        object.__setattr__(self, "_values", {name: values.get(name, mode.default)
                                             for name, mode in MODES.items()})

    def __getattr__(self, name: str) -> ModeValue:
        try:
            return self.__dict__["_values"][name]
        except KeyError:
            raise AttributeError(f"no mode {name!r}") from None

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Modes are immutable")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Modes) and self._values == other._values

    def __hash__(self) -> int:
        return hash(tuple(self._values.items()))

    def __repr__(self) -> str:
        return f"Modes({', '.join(f'{k}={v!r}' for k, v in self._values.items())})"

    def as_dict(self) -> dict[str, ModeValue]:
        return dict(self._values)

    def changed(self) -> dict[str, ModeValue]:
        """The modes that differ from the defaults (a plain run: {})."""
        return {name: value for name, value in self._values.items()
                if value != MODES[name].default}

    @property
    def label(self) -> str:
        """e.g. 'bf16', 'fp32+compile', 'fp32+native+workers2': the report's mode label."""
        parts = (MODES[name].label(value) for name, value in self._values.items())
        return "+".join(part for part in parts if part)

    def same_on_one_device(self, other: Modes) -> bool:
        """Whether one device computes the same under both (they differ at most in modes that
        do not matter on one device): what makes a 1-device reference of a row."""
        return all(self._values[name] == other._values[name]
                   for name, mode in MODES.items() if mode.matters_on_one_device)


def modes_of(record: dict) -> Modes:
    """A record's modes; one written before modes existed ran with the defaults."""
    return Modes(**record.get("modes", {}))


def modes_schema(version: int) -> tuple[dict, list[dict]]:
    """The record schema's ``modes`` (every mode's entry, those of the first schema with modes
    required) and the rules that require each later mode from the schema version that first
    carried it up to ``version``, the current one."""
    entry = {"type": "object",
             "required": [m.name for m in MODES.values() if m.since == FIRST_SCHEMA],
             "properties": {m.name: m.schema() for m in MODES.values()},
             # a mode this parbench does not know (a newer one's): an invalid record, skipped
             # by the report with a line, rather than a crash where the modes are read
             "additionalProperties": False}
    later = sorted({m.since for m in MODES.values() if m.since > FIRST_SCHEMA})
    rules = [{"if": {"properties": {"schema_version": {"enum": list(range(since, version + 1))}}},
              "then": {"properties": {"modes": {"required": [
                  m.name for m in MODES.values() if m.since == since]}}}} for since in later]
    return entry, rules


def input_problem(modes: Modes, has_batchnorm: bool, per_device_batch: int) -> str | None:
    """What is wrong with the modes asked for in themselves (one line for a UsageError), or
    None: a value out of its mode's range, or a combination that cannot work anywhere."""
    for name, value in modes.as_dict().items():
        problem = MODES[name].problem(value)
        if problem:
            return problem
    if modes.sync_bn and not has_batchnorm:
        return "--sync-bn needs a model with BatchNorm; this one has none"
    if modes.loader_workers and modes.input != "native":
        return "--loader-workers needs --input native (the arrays feed has no loader)"
    if per_device_batch % modes.grad_accum:
        return (f"--grad-accum {modes.grad_accum} does not divide the per-device batch "
                f"{per_device_batch}")
    return None


def refusal(backend: Backend, modes: Modes, gpus: int, devices: int) -> str | None:
    """Why ``backend`` cannot run ``modes`` on ``devices`` devices here (the framework refuses
    a mode, or does it on GPUs only), or None."""
    if modes.sync_bn and devices == 1:
        return ("--sync-bn needs several devices: one device has no other BatchNorm "
                "statistics to synchronize")
    asked, framework = set(modes.changed()), backend.info
    if "reshard_after_forward" in asked and not backend.reshards:
        return (f"{_spelled(modes, 'reshard_after_forward')} is not available for "
                f"{backend.name}: only a sharded backend that lets you choose when parameters "
                f"are freed has it ({', '.join(RESHARDING)})")
    for mode in sorted(asked):
        value = f"{mode}={getattr(modes, mode)}"  # a refusal of one value only, as precision=fp16
        why = (backend.refusals.get(mode) or framework.refusals.get(mode)
               or backend.refusals.get(value) or framework.refusals.get(value))
        if why is None and not gpus:
            why = framework.gpu_only.get(mode)
        if why:
            return f"{_spelled(modes, mode)} is not available for {backend.name}: {why}"
    for (first, second), why in framework.gpu_only_pairs.items():
        if {first, second} <= asked and not gpus:
            return (f"{_spelled(modes, first)} with {_spelled(modes, second)} is not available "
                    f"for {backend.name} without GPUs: {why}")
    return None


def _spelled(modes: Modes, name: str) -> str:
    return MODES[name].spelled(getattr(modes, name))


def check_observed(modes: Modes, seen: Observed, clips: bool = False) -> None:
    """Raise when a mode (or ``clips``: --clip-grad-norm) did not take effect (the run is then
    recorded as failed)."""
    problems = []
    if clips and seen.clipped_steps is None:
        problems.append("--clip-grad-norm is set but the step did not clip")
    for name, value in modes.as_dict().items():
        verify = MODES[name].verify
        problem = verify(value, seen) if verify else None
        if problem:
            problems.append(problem)
    if problems:
        raise RuntimeError("a mode did not take effect: " + "; ".join(problems))
