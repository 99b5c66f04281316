"""The result record: one JSON file per run and repeat, written atomically, and its checks."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import jsonschema

from parbench.base.errors import UsageError
from parbench.base.files import write_atomic
from parbench.contract.spec import sha256_of
from parbench.contract.tasks import TASK_BEFORE_SCHEMA_7, TASKS, Task, record_rules
from parbench.run.modes import modes_schema
from parbench.run.profiling import SUFFIX
from parbench.run.registry import FRAMEWORKS

SCHEMA_VERSION = 14  # 2: variant, env.network_isolated, env.load_1m_start/_end, env.other_cpu_s;
# 3: modes, metrics.compute_dtype and the other observed modes, macro scores, confusion matrix;
# 4: modes.input and .loader_workers, metrics.input (what each device trained on, data waits);
# 5: nnodes, node_rank (the writer), hosts (per rank), metrics.nodes (step time per node);
# 6: status diverged, with diverged (the step, rank and loss where training stopped);
# 7: task (image-classification or language-modeling), metrics.items_per_step; a language
# model's metrics carry perplexity, tokens, loss_floor and floor_gap instead of macro scores;
# 8: modes.reshard_after_forward, metrics.state_bytes (per device: parameters, gradients,
# optimizer state held after the first step) and metrics.communication (one step's collectives);
# 9: metrics.flops (model FLOPs per step, achieved TFLOP/s, utilisation of the measured peak,
# MFU against a datasheet peak);
# 10: metrics.steady_step_ms (each steady step's time), env.memory_gib and env.libraries (the
# versions of numpy and of each framework's companion packages: jaxlib, keras, flax, optax);
# 11: sweep (a compare sweep's id, its round order's seed, the run's place in its round and,
# for a sweep that stops when its answers are clear, the most rounds it planned),
# metrics.cpu_ms_per_step (each rank's user and system CPU per steady step), and
# metrics.flops.utilisation redefined: the whole run's achieved FLOP/s over the measured peak
# of every core (device) the run used, at flops.peak_threads threads per node (before 11: per
# device, over one worker's threads' peak, which a one-process and a multi-process run of the
# same cores could not share);
# 12: metrics.target (--target: the figure and value aimed at, whether and when it was
# reached, in seconds from the first touch of training data, steps and samples or tokens; the
# run stops there), each evaluation's wall_s on that clock, and no metrics.target_accuracy;
# 13: task object-detection, whose metrics carry precision, recall, f1 and ap50, each _all,
# _small and _large, in-domain and _shifted (null where the data has no shifted split);
# 14: metrics.confusion_matrix null above 100 classes (ImageNet's 1000: 7 MB of JSON a record).
# Versions 1 to 4 are still read (they ran fp32, eager, without sync BN or accumulation, fed
# from the contract's arrays).
SCHEMA = json.loads((Path(__file__).with_name("record_schema.json")).read_text())
SCHEMA["properties"]["framework"] = {"enum": list(FRAMEWORKS)}  # the registry's, not a copy
SCHEMA["properties"]["task"] = {"enum": list(TASKS)}
SCHEMA["allOf"] += record_rules()  # each task's metrics, as the task declares them
SCHEMA["properties"]["modes"], _MODE_RULES = modes_schema(SCHEMA_VERSION)  # from MODES
SCHEMA["allOf"] += _MODE_RULES
STATUSES = ("ok", "failed", "timeout", "diverged", "preempted")
BUSY_LOAD_PER_CORE = 0.5  # a run that starts with more load than this per core is noisy
# Where a record goes when --out cannot take it: /dev/shm is memory, so a full disk does not
# stop it.
FALLBACK_FOLDERS = (Path(tempfile.gettempdir()) / "parbench-unsaved",
                    Path("/dev/shm/parbench-unsaved"))


def machine_busy(load_1m: float, cores: int) -> bool:
    """Whether a 1-minute load average means the machine was busy: above BUSY_LOAD_PER_CORE
    per core parbench may use (``env.cores``). compare's warning before a sweep uses it."""
    return load_1m > BUSY_LOAD_PER_CORE * cores


def run_was_busy(record: dict) -> bool | None:
    """Whether other processes competed with this run; None when the record cannot tell
    (schema 1). The measured CPU time of processes outside the run (``env.other_cpu_s``),
    averaged over the run, counts in cores like a load; only without it does the load average
    at the start decide. The load average alone would blame a sweep for itself: it is a
    one-minute moving average, so it still holds the previous run of the same sweep."""
    env = record["env"]
    other, duration = env.get("other_cpu_s"), record.get("duration_s") or 0
    if other is not None and duration > 0:
        return other / duration > BUSY_LOAD_PER_CORE * env["cores"]
    load = env.get("load_1m_start")
    return None if load is None else machine_busy(load, env["cores"])


def record_name(backend: str, launcher: str, world_size: int, spec_sha256: str,
                variant: dict, repeat: int) -> str:
    """``<backend>-<launcher>-n<devices>-<spec>-<variant>-r<repeat>.json``: a rerun of the same
    configuration replaces its own earlier record, and nothing else."""
    return (f"{backend}-{launcher}-n{world_size}-{spec_sha256[:10]}-"
            f"{sha256_of(variant)[:6]}-r{repeat}.json")


def name_of(record: dict) -> str:
    return record_name(record["backend"], record["launcher"], record["world_size"],
                       record["spec_sha256"], record["variant"], record["repeat"])


class InvalidRecord(ValueError):
    """A record that does not validate against its schema: a bug in what built it, so it is
    never written anywhere, not even to a fallback folder, and the run fails loudly."""

    def __init__(self, problems: list[str]):
        super().__init__(f"the record does not validate ({len(problems)} problem(s)): "
                         + "; ".join(problems))
        self.problems = problems


def write_record(folder: Path, record: dict) -> Path:
    """Write ``record`` into ``folder`` under its name, atomically; checked first (InvalidRecord
    with every problem, nothing written) so that no writer leaves a file ``check`` refuses."""
    problems = check_record(record)
    if problems:
        raise InvalidRecord(problems)
    target = Path(folder) / name_of(record)
    write_atomic(target, json.dumps(record, indent=1).encode())
    return target


def probe_folder(folder: Path, option: str) -> None:
    """Create ``folder`` and prove a file can be written there, before anything trains: a
    place that cannot take the results is bad input (UsageError), not a lost run."""
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".parbench-probe-"):
            pass
    except OSError as err:
        raise UsageError(f"{option} {folder}: cannot write there "
                         f"({err.strerror or err})") from None


def probe_file(file: Path, option: str) -> None:
    """The same for a file to be written at the end: its folder must take files, and the path
    must not be a folder already."""
    if Path(file).is_dir():
        raise UsageError(f"{option} {file}: is a folder; give a file name")
    probe_folder(Path(file).parent, option)


def save_record(folder: Path, record: dict) -> tuple[Path, str | None]:
    """Write ``record`` into ``folder``, or, when that fails (disk full, folder gone), into the
    first fallback folder that takes it; (path, problem) where problem names what went wrong.
    A record is never dropped: with no writable place at all it is printed to stdout. Only a
    place that fails (OSError) sends it elsewhere: an InvalidRecord is raised before any write."""
    try:
        return write_record(folder, record), None
    except OSError as err:
        problem = f"could not write the record into {folder} ({err.strerror or err})"
    for fallback in FALLBACK_FOLDERS:
        try:
            path = write_record(fallback, record)
        except OSError:
            continue
        return path, f"{problem}; it was saved to {path} instead"
    print(json.dumps(record))
    return Path("-"), f"{problem}, nor into any of {', '.join(map(str, FALLBACK_FOLDERS))}; " \
        "it was printed to stdout instead"


TASK_SINCE = 7  # the schema version that added ``task``


def task_name_of(record: dict) -> object:
    """The task the record names; a record before schema 7 names none and is of
    TASK_BEFORE_SCHEMA_7, the only task then."""
    return record.get("task", TASK_BEFORE_SCHEMA_7)


def task_of_record(record: dict) -> type[Task]:
    """The task of a readable record, from the record itself: the report reads what the record
    says rather than looking its model up, so a model this version lists under no task makes
    the record unreadable (``unreadable_reasons``), never a crash in the middle of a report."""
    return TASKS[task_name_of(record)]


def unreadable_reasons(record: dict) -> list[str]:
    """Why this version cannot read ``record``, one line each (empty when it can): a schema
    newer than SCHEMA_VERSION, a task or framework it does not know, a model that is not one of
    its task's. Such a record comes from a newer parbench or a hand edit; the report would
    read its figures by rules this version does not have. An unknown backend, launcher or
    dataset is readable: the report shows such a row after the known ones."""
    version, model = record.get("schema_version"), record.get("model")
    # a record of schema 7 on without a task is invalid (the schema says so): no task is
    # assumed for it, nor a reason made up from one
    named = "task" in record or (isinstance(version, int) and version < TASK_SINCE)
    task = task_name_of(record) if named else None
    reasons = []
    if isinstance(version, int) and version > SCHEMA_VERSION:
        reasons.append(f"schema_version {version} is newer than this parbench reads (1 to "
                       f"{SCHEMA_VERSION}): written by a newer parbench")
    if isinstance(task, str) and task not in TASKS:
        reasons.append(f"task {task!r} is not one this version knows ({', '.join(TASKS)})")
    elif isinstance(task, str) and isinstance(model, str) and model not in TASKS[task].models:
        reasons.append(f"model {model!r} is not one of the {task} models this version knows "
                       f"({', '.join(TASKS[task].models)})")
    framework = record.get("framework")
    if isinstance(framework, str) and framework not in FRAMEWORKS:
        reasons.append(f"framework {framework!r} is not one this version knows "
                       f"({', '.join(FRAMEWORKS)})")
    return reasons


def check_record(record: object) -> list[str]:
    """Every problem with one record (empty when it is valid). A record this version cannot
    read (``unreadable_reasons``) has those reasons only: the rest of it follows the rules of
    a version, task or model this one does not have, so the schema's verdicts would be noise."""
    reasons = unreadable_reasons(record) if isinstance(record, dict) else []
    if reasons:
        return reasons
    validator = jsonschema.Draft202012Validator(SCHEMA)
    problems = [f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"
                for e in validator.iter_errors(record)]
    if problems or not isinstance(record, dict):
        return problems
    if record["status"] == "ok" and record["metrics"] is None:
        problems.append("metrics: an ok record needs metrics")
    if record["status"] != "ok" and not record["error"]:
        problems.append(f"error: a {record['status']} record needs the error")
    return problems


@dataclass
class FolderCheck:
    files: int  # *.json files found, profile files (*.profile.json) not counted
    records: list[dict]  # the valid ones
    invalid: dict[str, list[str]]  # file -> its problems, for every invalid file

    @property
    def problems(self) -> list[str]:
        """'file: problem', every problem of every invalid file."""
        return [f"{file}: {p}" for file, found in self.invalid.items() for p in found]

    @property
    def reasons(self) -> dict[str, str]:
        """file -> why a report skips it, on one line: its first problem and how many more
        it has (``parbench check`` lists them all)."""
        return {file: " ".join(found[0].split())
                + (f" (and {len(found) - 1} more problem(s))" if len(found) > 1 else "")
                for file, found in self.invalid.items()}


def check_folder(folder: Path) -> FolderCheck:
    """Every *.json under ``folder``, validated; profile files (``*.profile.json``, written
    next to profiled records) are not records and are neither checked nor counted."""
    files = sorted(p for p in Path(folder).rglob("*.json") if not p.name.endswith(SUFFIX))
    records, invalid = [], {}
    for file in files:
        try:
            record = json.loads(file.read_text())
        except (OSError, ValueError) as err:
            invalid[str(file)] = [f"not readable JSON ({err})"]
            continue
        found = check_record(record)
        if found:
            invalid[str(file)] = found
        else:
            records.append(record)
    return FolderCheck(len(files), records, invalid)
