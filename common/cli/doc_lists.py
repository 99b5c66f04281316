"""Lists in docs that cannot drift from the code: the run modes, which backend takes which mode,
and the backends themselves, each rendered from the table the code runs on (``MODES``,
``BACKENDS`` and ``parbench.run.modes.refusal``), so a doc can only say what a run would do.

A doc holds one under a marker, rewritten by ``python -m parbench.cli.doc_tables``:

    <!-- list: mode-support input loader_workers -->
    <!-- end list -->

This module holds the lists about modes and backends and the Markdown they share; the
record schema's lists are in doc_schema, the launchers' ports in doc_ports, the records'
provenance in doc_folders.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

from parbench.cli.ignored import git_ignored
from parbench.run.modes import MODES, Mode, Modes, input_problem, refusal
from parbench.run.registry import BACKENDS, FRAMEWORKS, LAUNCHERS, Backend

# What a column's request needs besides itself to be valid at all (input_problem), so the
# matrix shows the framework's answer, not the value check's: loader workers need a loader.
ALONGSIDE = {"loader_workers": {"input": "native"}}
NO_GPU_RUN = "no GPU run committed"


def cell(text: object) -> str:
    """One Markdown table cell: a '|' inside would end it."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def table(header: list[str], rows: list[list[object]]) -> str:
    """A plain Markdown table, as the hand-written ones in the docs are."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def code(text: str) -> str:
    return f"`{text}`"


def _values(mode: Mode) -> str:
    """What a user may give, the default marked: a switch, the choices, or a range."""
    if mode.kind is bool:
        return "a switch (off unless given)"
    if mode.choices:
        return ", ".join(code(c) + (" (default)" if c == mode.default else "")
                         for c in mode.choices)
    least = "0 or more" if mode.minimum == 0 else f"at least {mode.minimum}"
    return f"an integer, {least} (default {mode.default})"


def modes_list(args: list[str], root: Path) -> str:
    """Every mode of MODES in its order: the flag, its values, the record schema that first
    carried it, the backends it applies to where not every one, and its help."""
    rows = []
    for mode in MODES.values():
        flag = mode.flag + (f" {mode.metavar}" if mode.metavar else "")
        where = ", ".join(b.name for b in BACKENDS.values() if mode.applies(b)) \
            if mode.applies else "every backend"
        rows.append([code(flag), _values(mode), mode.since, where, mode.help])
    intro = (f"{len(MODES)} run modes, declared in `MODES` (`common/run/modes.py`); each is a "
             "key of a record's `modes` from the schema version named.\n\n")
    return intro + table(["option", "values", "schema", "applies to", "what it does"], rows)


def _requests() -> list[tuple[str, str, Modes]]:
    """(mode, column label, the request) of each mode's every non-default value, in MODES'
    order; a request input_problem refuses in itself is a bug here, not a doc."""
    requests = []
    for name, mode in MODES.items():
        if mode.kind is bool:
            values = [True]
        elif mode.choices:
            values = [c for c in mode.choices if c != mode.default]
        else:
            values = [max(mode.default, mode.minimum or 0) + 1]
        for value in values:
            label = mode.flag if mode.kind is bool else f"{mode.flag} {value}"
            modes = Modes(**{name: value, **ALONGSIDE.get(name, {})})
            problem = input_problem(modes, has_batchnorm=True, per_device_batch=64)
            if problem:
                raise ValueError(f"the list's request {label} is invalid in itself: {problem}")
            requests.append((name, label, modes))
    return requests


def _reason(message: str) -> str:
    """A refusal without the backend's name, so one reason is one note however many backends
    give it."""
    found = re.fullmatch(r".*? is not available for [\w-]+(?: without GPUs)?: (.*)", message)
    return found[1] if found else message


class _Notes:
    """Numbered notes under a table: each distinct text once, in order of first use."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def ref(self, text: str) -> int:
        if text not in self.texts:
            self.texts.append(text)
        return self.texts.index(text) + 1

    def markdown(self) -> str:
        return "".join(f"{i}. {cell(text)}\n" for i, text in enumerate(self.texts, 1))


def _answer(backend: Backend, on_cpu: str | None, on_gpus: str | None, notes: _Notes) -> str:
    """'yes', 'GPUs [n]' or 'no [n]' from the refusals without GPUs and with them; a backend
    that runs on GPUs only answers 'GPUs' at best."""
    if on_gpus:
        return f"no [{notes.ref(_reason(on_gpus))}]"
    if on_cpu or backend.gpu_only:
        return f"GPUs [{notes.ref(_reason(on_cpu) if on_cpu else backend.gpu_only)}]"
    return "yes"


def support(backend: Backend, modes: Modes, notes: _Notes) -> str:
    """What ``parbench run`` answers for this backend and request, without GPUs and with them
    (on 2 devices where the backend has several)."""
    devices = 2 if backend.parallel else 1
    return _answer(backend, refusal(backend, modes, gpus=0, devices=devices),
                   refusal(backend, modes, gpus=1, devices=devices), notes)


def mode_support(args: list[str], root: Path) -> str:
    """Backend x request: the mode refusals of the registry as parbench.run.modes.refusal
    applies them; ``args`` picks modes by name (default: every one, and --profile)."""
    unknown = [a for a in args if a not in MODES]
    if unknown:
        raise ValueError(f"list mode-support: unknown mode(s) {', '.join(unknown)}; "
                         f"known: {', '.join(MODES)}")
    requests = [(label, modes) for name, label, modes in _requests()
                if not args or name in args]
    notes = _Notes()
    rows = []
    for backend in BACKENDS.values():
        row = [backend.name, _processes(backend),
               *(support(backend, modes, notes) for _, modes in requests)]
        if not args:
            why = backend.profile_refusal
            row.append(_answer(backend, why, why, notes))
        rows.append(row)
    header = ["backend", "processes", *(code(label) for label, _ in requests)] + \
        ([] if args else [code("--profile")])
    legend = ("yes: on a CPU and on GPUs; GPUs: refused without GPUs; no: refused everywhere "
              "(`parbench run` exits 2 with the note's reason). Parallel backends asked at 2 "
              "devices.\n\n")
    return legend + table(header, rows) + "\n" + notes.markdown() + \
        ("" if args else _pairs())


def _pairs() -> str:
    """The combinations a framework runs on GPUs only, which no single column shows."""
    lines = [f"- {framework.name}: {MODES[a].flag} with {MODES[b].flag} on GPUs only: {why}\n"
             for framework in FRAMEWORKS.values()
             for (a, b), why in framework.gpu_only_pairs.items()]
    return "\nTogether:\n\n" + "".join(lines) if lines else ""


def gpu_runs(root: Path) -> Counter:
    """Per backend, the committed records under results/ that ran on GPUs (a non-empty
    ``env.gpus``): a GPU path the docs describe but no record shows was never run here. A
    folder git ignores (a user's own results/runs) is not the project's, so it never counts."""
    found: Counter = Counter()
    paths = sorted((root / "results").rglob("*.json"))
    ignored = git_ignored(paths)
    for path in paths:
        if path.name.endswith(".profile.json") or path.absolute() in ignored:
            continue
        record = json.loads(path.read_text())
        if isinstance(record, dict) and (record.get("env") or {}).get("gpus"):
            found[record.get("backend")] += 1
    return found


def _processes(backend: Backend) -> str:
    if not backend.parallel:
        return "one (1 device)"
    return "one for every device" if backend.one_process else "one per device"


def _on_cpu(backend: Backend) -> str:
    if backend.gpu_only:
        return "refused: GPUs only"
    if backend.gpu_for_parallel:
        return f"1 device only ({backend.gpu_for_parallel})"
    return "yes"


def _approach(backend: Backend) -> str:
    if not backend.sharded:
        return backend.strategy
    return (f"{backend.strategy}: each device holds a shard of the training state "
            f"(replicated twin: {backend.replicated_twin})")


def backends_list(args: list[str], root: Path) -> str:
    """Every backend of BACKENDS: its framework, approach, launchers (the default first),
    processes, whether a CPU runs it, and whether a committed record shows its GPU path."""
    gpus = gpu_runs(root)
    rows, refused = [], []
    for backend in BACKENDS.values():
        ran = f"{gpus[backend.name]} GPU record(s) committed" if gpus[backend.name] \
            else NO_GPU_RUN
        rows.append([code(backend.name), backend.framework, _approach(backend),
                     ", ".join(code(name) for name in backend.launchers),
                     _processes(backend), _on_cpu(backend), ran])
        refused += [f"- {code(backend.name)} not under {code(launcher)}: {why}\n"
                    for launcher, why in backend.launcher_refusals.items()]
    text = table(["backend", "framework", "approach", "launchers (default first)",
                  "processes", "on a CPU", "GPUs"], rows)
    spans = [f"{code(name)}" for name, launcher in LAUNCHERS.items()
             if launcher.single_node is None]
    text += f"\nLaunchers that span several machines: {', '.join(spans)}.\n"
    return text + ("\n" + "".join(refused) if refused else "")
