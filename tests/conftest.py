"""Shared helpers: every test drives parbench the way a user does, through the CLI in a
subprocess, so a framework is never imported into the pytest process (TensorFlow and Paddle
segfault when imported into one process)."""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import pickle
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from fnmatch import fnmatch
from pathlib import Path

import numpy as np
import pytest

from parbench.cli.parity import FORWARD_CASES, run_forwards
from parbench.contract.spec import MODEL_NAMES
from parbench.run.peak import CACHE_ENV
from parbench.run.registry import BACKENDS, FRAMEWORKS

COST_ENV = "PARBENCH_SUITE_COST"  # a folder: what each test cost (benchmarks/suite_cost.py)
TRAINING_COMMANDS = ("run", "compare", "explain", "parity")
_commands_started = [0]  # parbench training commands this process started, for the cost file
_commands_run: list[dict] = []  # each one's arguments (paths as <path>) and CPU seconds


def parbench(*args: str, env: dict | None = None, timeout: float = 600,
             cwd: str | Path | None = None,
             prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """Run ``parbench ARGS`` like a user; returns the finished process. ``prefix`` is a
    command that runs it, e.g. ``("taskset", "-c", "0")``."""
    training = bool(args) and args[0] in TRAINING_COMMANDS and "--help" not in args
    _commands_started[0] += training
    full_env = {**os.environ, **(env or {})}
    cpu = _cpu_seconds()
    done = subprocess.run([*prefix, sys.executable, "-m", "parbench.cli", *args],
                          capture_output=True, text=True, timeout=timeout, env=full_env, cwd=cwd)
    if training:  # a fault or cache chosen through the environment makes another run
        _commands_run.append({"args": [_without_paths(arg) for arg in args],
                              "env": {k: _without_paths(v) for k, v in (env or {}).items()},
                              "cpu_s": _cpu_seconds() - cpu})
    return done


def _without_paths(arg: str) -> str:
    """A test's own folders differ from run to run; two tests that train the same way differ
    only there (the cost file finds such repeats)."""
    return "<path>" if os.path.isabs(arg) or os.sep in arg else arg


@pytest.fixture(scope="session", autouse=True)
def private_peak_cache(tmp_path_factory) -> Path:
    """Every run of the suite reads an empty matmul-peak cache of its own, never the user's
    (~/.cache/parbench/peak.json): a record's utilisation must not depend on what someone
    measured on this machine before. A test that wants a peak measures it into its own."""
    path = tmp_path_factory.mktemp("peak-cache") / "peak.json"
    os.environ[CACHE_ENV] = str(path)
    return path


def run_ok(folder: Path, backend: str, *args: str) -> dict:
    """``parbench run BACKEND ARGS`` into ``folder/out``; its one record, which must be ok."""
    out = Path(folder) / "out"
    done = parbench("run", backend, *args, "--out", str(out), cwd=folder)
    assert done.returncode == 0, done.stderr[-3000:]
    (record,) = records_in(out)
    assert record["status"] == "ok", record["error"]
    return record


def run_digits(folder: Path, backend: str, *args: str, steps: int = 6) -> dict:
    """A short ok run on the small digits set (global batch 32): what mode tests train."""
    return run_ok(folder, backend, "--dataset", "digits", "--steps", str(steps),
                  "--global-batch", "32", *args)


def assert_scores_follow_predictions(metrics: dict, labels: np.ndarray) -> None:
    """The record's confusion matrix holds every test row once, under its true class, and the
    model predicts more than one class (a vacuous matrix would pass). That the matrix is the
    final model's, and the scores the matrix's, tests/test_evaluation.py shows independently."""
    confusion = np.array(metrics["confusion_matrix"])
    assert confusion.sum(axis=1).tolist() == np.bincount(labels, minlength=len(confusion)).tolist()
    assert len(np.flatnonzero(confusion.sum(axis=0))) > 1


def default_threads(processes: int) -> int:
    """The threads per worker a run gets without --threads: the cores this process may use
    (its affinity, not the machine's core count) shared among the run's processes."""
    return max(1, len(os.sched_getaffinity(0)) // processes)


def sub_command_output(add_parser: Callable, argv: list[str], capsys) -> str:
    """What the sub-command that ``add_parser`` adds prints for ``argv``; it must succeed."""
    parser = argparse.ArgumentParser(prog="parbench")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    assert args.func(args) == 0
    return capsys.readouterr().out


def records_in(folder: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(Path(folder).glob("*.json"))]


needs_scontrol = pytest.mark.skipif(
    not shutil.which("scontrol"),
    reason="Slurm's scontrol is not installed (Debian's slurm-client; .ci/run installs it)")


@pytest.fixture(scope="session")
def slurm_env(tmp_path_factory) -> dict[str, str]:
    """What scontrol needs to expand nodelists without a cluster: a minimal slurm.conf (no
    controller is contacted by 'scontrol show hostnames')."""
    folder = tmp_path_factory.mktemp("slurm")
    (folder / "slurm.conf").write_text("ClusterName=parbench-tests\nSlurmctldHost=localhost\n")
    return {"SLURM_CONF": str(folder / "slurm.conf"), "PATH": os.environ.get("PATH", "")}


@pytest.fixture(scope="session")
def trajectory(tmp_path_factory):
    """trajectory(backend, **overrides) -> run_trajectory's (record, final weights), trained
    once per test session for each configuration, whichever pytest-xdist worker asks first:
    several test files compare against the same reference runs (torch-single's, each
    framework's single backend), and their files run on different workers. Read-only results."""
    from parbench.cli.parity import run_trajectory

    def train(backend: str, **overrides) -> tuple[dict, dict]:
        if overrides.get("dataset") == "digits":  # run_trajectory's own default
            del overrides["dataset"]
        key = ("trajectory", backend, tuple(sorted(overrides.items())))
        return shared_result(tmp_path_factory, key, lambda: run_trajectory(
            backend, tmp_path_factory.mktemp("trajectory"), **overrides))

    return train


_KEPT: dict[tuple, object] = {}  # this worker's copies of shared results


def shared_result(tmp_path_factory, key: tuple, compute: Callable[[], object]) -> object:
    """``compute()``'s result for ``key``, computed once per test session: the first worker to
    ask computes it under a lock and leaves it in the session's shared folder, the others
    wait for it and read it. A compute that raises leaves nothing, so the next asker tries
    again (and fails the same way, in its own test)."""
    if key in _KEPT:
        return _KEPT[key]
    base = tmp_path_factory.getbasetemp()
    # under xdist each worker's base folder is inside the session's; without it, the base is
    # the session's own (its parent holds earlier sessions)
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared-runs"
    folder.mkdir(exist_ok=True)
    name = hashlib.sha256(repr(key).encode()).hexdigest()[:16]
    result, lock = folder / f"{name}.pickle", folder / f"{name}.lock"
    with lock.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # released when the file closes
        if not result.exists():
            partial = folder / f"{name}.partial"
            partial.write_bytes(pickle.dumps(compute()))
            partial.rename(result)
    _KEPT[key] = pickle.loads(result.read_bytes())
    return _KEPT[key]


# What the forward fixture asks every framework: parity's cases, and an inference pass of
# every model kind (the weight round trip, tests/test_weights_roundtrip.py)
FORWARD_REQUESTS = tuple(dict.fromkeys([*FORWARD_CASES, *((m, "eval") for m in MODEL_NAMES)]))


@pytest.fixture(scope="session")
def forwards(tmp_path_factory):
    """forwards(framework) -> {(model, mode): outputs} of every FORWARD_REQUESTS case, answered
    by one process of that framework per test session (its import paid once, on whichever worker
    asks first)."""
    def get(framework: str) -> dict:
        return shared_result(tmp_path_factory, ("forwards", framework), lambda: run_forwards(
            framework, list(FORWARD_REQUESTS), tmp_path_factory.mktemp(f"forward-{framework}")))

    return get


def needs(framework: str):
    """Skip marker for tests of a framework that is not installed here."""
    reason = FRAMEWORKS[framework].missing_reason()
    return pytest.mark.skipif(reason is not None, reason=reason or "")


def runnable(backend: str):
    """Skip marker for tests of a backend that cannot run here (its framework missing, or
    GPUs it needs)."""
    reason = BACKENDS[backend].missing_reason()
    return pytest.mark.skipif(reason is not None, reason=reason or "")


def _cpu_seconds() -> float:
    """CPU time of this process and of every child it has reaped (a parbench command counts
    its own workers: each process reaps its children)."""
    return sum(usage.ru_utime + usage.ru_stime for usage in
               (resource.getrusage(resource.RUSAGE_SELF),
                resource.getrusage(resource.RUSAGE_CHILDREN)))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """With PARBENCH_SUITE_COST set, one JSON line per test (setup, call and teardown: a
    module's shared runs count for the test that first asks for them) into that folder, a
    file per pytest-xdist worker."""
    folder = os.environ.get(COST_ENV)
    start, cpu, commands = time.monotonic(), _cpu_seconds(), _commands_started[0]
    _commands_run.clear()
    yield
    if folder:
        line = {"file": item.location[0], "test": item.nodeid,
                "wall_s": time.monotonic() - start, "cpu_s": _cpu_seconds() - cpu,
                "commands": _commands_started[0] - commands, "runs": list(_commands_run)}
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        Path(folder).mkdir(parents=True, exist_ok=True)  # else every worker stops at its 1st test
        with open(Path(folder) / f"{worker}.jsonl", "a") as out:
            out.write(json.dumps(line) + "\n")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A framework's own test files (parbench.run.registry: Framework.test_files) are skipped
    where it is not installed, without a marker in each file."""
    for item in items:
        for framework in FRAMEWORKS.values():
            if any(fnmatch(item.path.name, pattern) for pattern in framework.test_files):
                item.add_marker(needs(framework.name))


def write_cifar(folder, n_per_batch=20, seed=0):
    """A miniature CIFAR-10 in the official cifar-10-batches-py pickle format."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {b"data": rng.integers(0, 256, (n_per_batch, 3072), dtype=np.uint8),
                 b"labels": list(rng.integers(0, 10, n_per_batch))}
        with open(folder / name, "wb") as handle:
            pickle.dump(batch, handle)


UNEVEN_INPUT = ("--train-subset", "4095", "--global-batch", "64", "--epochs", "1")
# Tests of what a pipeline feeds train the cheapest model: which samples reach which device, in
# what order, and the epoch's account do not depend on the model (one native epoch of
# tf-mirrored on 2 devices, beside other tests: 64.5 s with the default resnet, 26.9 s with mlp)
FEED_ONLY = ("--model", "mlp")


def uneven_input_row(backend: str) -> dict:
    """The porting doc's measured row for ``backend`` in section 15.0's uneven-dataset table
    (`contract` for the arrays row): devices, steps per epoch, samples, distinct, duplicated,
    dropped, as ints."""
    lines = (Path(__file__).parents[1] / "docs" / "porting.md").read_text().splitlines()
    start = lines.index("<!-- uneven-input-table -->")
    for line in lines[start + 3:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if cells[0].split()[0].strip("`") == backend:
            keys = ("devices", "steps_per_epoch", "samples", "distinct", "duplicated",
                    "dropped")
            return dict(zip(keys, (int(cell) for cell in cells[1:])))
    raise KeyError(f"no row for {backend} in docs/porting.md's uneven-input table")
