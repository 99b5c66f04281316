"""Run modes: how a backend computes (precision, compilation) and what makes N devices train
like one (synchronized BatchNorm, gradient accumulation).

Each mode is refused up front where a framework cannot do it (one line, exit 2: ``refusal``),
and proven to have taken effect once it runs: after the first step every rank reports what it
observed (``Observed``), and ``check_observed`` fails the run when that contradicts the request.
Several of these modes are silent no-ops when misused (Paddle AMP on CPU, torch.compile around
a bare ``nn.Sequential`` under DDP, a BatchNorm left unconverted), which is why the check exists.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from .registry import Backend

PRECISIONS = ("fp32", "bf16", "fp16")
INPUTS = ("arrays", "native")
# The dtype the first layer's activations must have on the first step, per --precision.
COMPUTE_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


@dataclass(frozen=True)
class Modes:
    precision: str = "fp32"  # fp32 | bf16 | fp16 (autocast / mixed policy, loss scaling)
    compile: bool = False  # torch.compile, TF XLA, Paddle to_static
    sync_bn: bool = False  # BatchNorm statistics over the global batch, not each shard
    grad_accum: int = 1  # micro-batches per optimizer step, gradients communicated once
    input: str = "arrays"  # arrays | native: who feeds the steps (see parbench.feeds)
    loader_workers: int = 0  # --input native: the loader's worker processes

    def changed(self) -> dict:
        """The modes that differ from the defaults (a plain run: {})."""
        default = Modes()
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) != getattr(default, f.name)}

    @property
    def label(self) -> str:
        """e.g. 'bf16', 'fp32+compile', 'fp32+native+workers2': the report's mode column."""
        parts = [self.precision, "compile" if self.compile else "",
                 "sync-bn" if self.sync_bn else "",
                 f"accum{self.grad_accum}" if self.grad_accum > 1 else "",
                 "native" if self.input == "native" else "",
                 f"workers{self.loader_workers}" if self.loader_workers else ""]
        return "+".join(p for p in parts if p)

    def as_dict(self) -> dict:
        return asdict(self)


def modes_of(record: dict) -> Modes:
    """A record's modes; one written before modes existed ran with the defaults."""
    return Modes(**record.get("modes", {}))


def refusal(backend: Backend, modes: Modes, gpus: int, has_batchnorm: bool, devices: int,
            per_device_batch: int) -> str | None:
    """Why ``backend`` cannot run ``modes`` here (one line for a UsageError), or None."""
    if modes.sync_bn and devices == 1:
        return ("--sync-bn needs several devices: one device has no other BatchNorm "
                "statistics to synchronize")
    asked, framework = set(modes.changed()), backend.info
    for mode in sorted(asked):
        why = backend.refusals.get(mode) or framework.refusals.get(mode)
        if why is None and not gpus:
            why = framework.gpu_only.get(mode)
        if why:
            return f"{_option(modes, mode)} is not available for {backend.name}: {why}"
    for (first, second), why in framework.gpu_only_pairs.items():
        if {first, second} <= asked and not gpus:
            return (f"{_option(modes, first)} with {_option(modes, second)} is not available "
                    f"for {backend.name} without GPUs: {why}")
    if modes.sync_bn and not has_batchnorm:
        return "--sync-bn needs a model with BatchNorm (resnet), this one has none"
    if modes.loader_workers < 0:
        return f"--loader-workers must be 0 or more, got {modes.loader_workers}"
    if modes.loader_workers and modes.input != "native":
        return "--loader-workers needs --input native (the arrays feed has no loader)"
    if modes.grad_accum < 1:
        return f"--grad-accum must be at least 1, got {modes.grad_accum}"
    if per_device_batch % modes.grad_accum:
        return (f"--grad-accum {modes.grad_accum} does not divide the per-device batch "
                f"{per_device_batch}")
    return None


def _option(modes: Modes, mode: str) -> str:
    """How the user spelled the mode: '--precision bf16', '--grad-accum 2', '--compile'."""
    value = getattr(modes, mode)
    flag = "--" + mode.replace("_", "-")
    return flag if isinstance(value, bool) else f"{flag} {value}"


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


def check_observed(modes: Modes, seen: Observed, clips: bool = False) -> None:
    """Raise when a mode (or ``clips``: --clip-grad-norm) did not take effect (the run is then
    recorded as failed)."""
    problems = []
    if clips and seen.clipped_steps is None:
        problems.append("--clip-grad-norm is set but the step did not clip")
    expected = COMPUTE_DTYPES[modes.precision]
    if seen.compute_dtype != expected:
        problems.append(f"--precision {modes.precision} expects {expected} activations, the "
                        f"first layer computed in {seen.compute_dtype}")
    if modes.compile and not seen.compiled_graphs:
        problems.append("--compile compiled no graph: the step ran eagerly")
    if modes.sync_bn and not seen.sync_bn_layers:
        problems.append("--sync-bn converted no BatchNorm layer")
    if seen.micro_batches != modes.grad_accum:
        problems.append(f"--grad-accum {modes.grad_accum} ran {seen.micro_batches} "
                        "micro-batch(es) in the first step")
    if problems:
        raise RuntimeError("a mode did not take effect: " + "; ".join(problems))
