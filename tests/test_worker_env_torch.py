"""What a worker process really runs with, seen from inside it: glibc's malloc thresholds that
give every worker a warm heap (parbench.launch.supervise.MALLOC_SETTINGS; a user's own setting
wins), the same settings in the record's env.allocator, and the thread variables. A
sitecustomize module on PYTHONPATH writes each worker's environment to a file from inside the
worker (found by its command line), so the test reads what the worker saw, not what the harness
meant to give it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import needs, parbench, records_in
from parbench.launch.supervise import MALLOC_SETTINGS

pytestmark = needs("torch")

PROBE = '''
import json, os
from pathlib import Path

_command = Path("/proc/self/cmdline").read_bytes().split(b"\\0")
if b"parbench.run.worker" in _command:
    names = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "OMP_NUM_THREADS")
    Path(os.environ["WORKER_ENV_PROBE"], f"{os.getpid()}.json").write_text(
        json.dumps({name: os.environ.get(name) for name in names}))
'''


def seen_by_workers(tmp_path: Path, *options: str, env: dict | None = None) -> tuple[list, dict]:
    """(each worker's environment as it saw it, the run's record)."""
    probes = tmp_path / "probes"
    probes.mkdir()
    (tmp_path / "sitecustomize.py").write_text(PROBE)
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)
    done = parbench("run", "torch-ddp", "--devices", "2", "--dataset", "digits", "--steps", "2",
                    "--global-batch", "32", *options, "--out", str(tmp_path / "out"),
                    env={"PYTHONPATH": path, "WORKER_ENV_PROBE": str(probes), **(env or {})},
                    cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (record,) = records_in(tmp_path / "out")
    # torchrun's ranks, each behind its watcher: every worker process wrote one
    return [json.loads(p.read_text()) for p in sorted(probes.glob("*.json"))], record


@pytest.mark.slow
def test_workers_run_with_the_allocator_settings_the_record_states(tmp_path):
    workers, record = seen_by_workers(tmp_path, "--threads", "1")
    assert len(workers) >= 2  # both ranks (and their watchers)
    for seen in workers:
        assert {k: seen[k] for k in MALLOC_SETTINGS} == MALLOC_SETTINGS
        assert seen["OMP_NUM_THREADS"] == "1"
    assert record["env"]["allocator"] == MALLOC_SETTINGS


@pytest.mark.slow
def test_a_users_own_allocator_setting_wins_and_is_recorded(tmp_path):
    mine = {"MALLOC_MMAP_THRESHOLD_": str(1 << 20)}
    workers, record = seen_by_workers(tmp_path, env=mine)
    expected = {**MALLOC_SETTINGS, **mine}
    assert workers and all({k: seen[k] for k in expected} == expected for seen in workers)
    assert record["env"]["allocator"] == expected
