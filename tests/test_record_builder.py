"""The record is built in one place (launch/record.py) and validated when written: a record that
does not match its schema is never written, not even to a fallback folder; a failed or diverged
run's record validates, fields in the order records have always had; the profile document
travels beside the record, never on it, and ``parbench run`` writes it next to the record; a
run's configuration is resolved once, from prepare to the built record."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from conftest import needs, parbench
from parbench.launch.config import RunConfig, resolve
from parbench.launch.harness import Execution, Prepared, prepare, run_variant
from parbench.launch.load import LoadSample, load_env
from parbench.launch.record import Outcome, Parts, build
from parbench.results.records import (
    FALLBACK_FOLDERS,
    SCHEMA,
    InvalidRecord,
    check_record,
    name_of,
    save_record,
    write_record,
)
from parbench.run.loop import RankLog
from parbench.run.profiling import SUFFIX, summary

# every record's fields, in the order the harness has always written them
FIELDS = ["schema_version", "run_id", "created", "backend", "framework", "strategy", "launcher",
          "world_size", "nnodes", "node_rank", "hosts", "status", "error", "seed", "repeat",
          "global_batch", "per_device_batch", "batch_mode", "lr", "lr_scaling", "steps",
          "optimizer", "dataset", "task", "model", "spec_sha256", "config", "variant", "modes",
          "metrics", "env", "duration_s", "notes"]


def prepared(folder: Path, **options) -> Prepared:
    """A checked torch-single configuration with its inputs on disk; nothing trains."""
    cfg = RunConfig.of(backend="torch-single", dataset="digits", model="mlp", steps=4,
                       global_batch=32, **options)
    return prepare(cfg, folder)


def built(p: Prepared, status: str, error: str | None, logs: list[RankLog] | None = None,
          diverged: dict | None = None) -> Outcome:
    """The builder's outcome for a repeat that ended with ``status``, without running it."""
    run = Execution(status, error, logs, time.time(), 1.5,
                    load_env(LoadSample.now(), LoadSample.now()), p.shared, diverged)
    return build(Parts(cfg=p.cfg, plan=p.plan, task=p.task, spec=p.spec,
                       spec_sha256=p.spec_sha256, variant=run_variant(p.plan), repeat=0,
                       run=run))


@pytest.mark.parametrize("profile", [False, True])
def test_a_failed_run_builds_a_valid_record_with_its_status_and_error(
        tmp_path: Path, profile: bool) -> None:
    outcome = built(prepared(tmp_path, profile=profile), "failed", "rank 0 exited with 17")
    record = outcome.record
    assert check_record(record) == []
    assert list(record) == FIELDS  # no profile summary for a run that never got there
    assert (record["status"], record["error"]) == ("failed", "rank 0 exited with 17")
    assert record["metrics"] is None and record["hosts"] == [] and outcome.profile is None
    assert record["variant"].get("profile", False) is profile


def test_a_diverged_run_keeps_what_its_ranks_described(tmp_path: Path) -> None:
    log = RankLog(rank=0, rows=32, host="node-a", losses=[2.3, float("nan")],
                  describe={"framework_version": "9.9", "notes": ["a note"], "own_fact": 1})
    where = {"step": 1, "rank": 0, "loss": "nan"}
    record = built(prepared(tmp_path), "diverged", "diverged at step 1", [log], where).record
    assert check_record(record) == []
    assert list(record) == [*FIELDS, "diverged"] and record["diverged"] == where
    assert record["hosts"] == ["node-a"] and record["notes"] == ["a note"]
    assert (record["env"]["framework_version"], record["env"]["own_fact"]) == ("9.9", 1)
    assert record["steps"] == 4 and record["metrics"] is None


def test_resolve_runs_once_from_prepare_to_the_built_record(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def counted(*args: object, **kwargs: object) -> object:
        calls.append(args)
        return resolve(*args, **kwargs)

    # wherever resolve was imported, so a second call from any module of parbench counts
    for module in [m for name, m in sys.modules.items() if name.startswith("parbench.")]:
        if getattr(module, "resolve", None) is resolve:
            monkeypatch.setattr(module, "resolve", counted)
    built(prepared(tmp_path), "failed", "rank 0 exited with 17")
    assert len(calls) == 1


def invalid(folder: Path) -> dict:
    """A built record spoilt the way a bug would: a status the schema does not know."""
    record = built(prepared(folder), "failed", "boom").record
    record["status"] = "finished"
    return record


def test_write_record_refuses_an_invalid_record_and_writes_nothing(tmp_path: Path) -> None:
    record, out = invalid(tmp_path / "inputs"), tmp_path / "out"
    out.mkdir()
    with pytest.raises(InvalidRecord, match="status") as raised:
        write_record(out, record)
    assert raised.value.problems and all("status" in p for p in raised.value.problems)
    assert list(out.iterdir()) == []  # not even a temporary file left behind


def test_save_record_never_dumps_an_invalid_record_anywhere(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    record = invalid(tmp_path / "inputs")
    blocker = tmp_path / "a-file"
    blocker.write_text("")  # --out under a file: today's fallback would take the record
    with pytest.raises(InvalidRecord):
        save_record(blocker / "runs", record)
    assert not any((folder / name_of(record)).exists() for folder in FALLBACK_FOLDERS)
    assert capsys.readouterr().out == ""  # nor printed as a last resort


def test_a_valid_record_is_written_as_before(tmp_path: Path) -> None:
    record = built(prepared(tmp_path / "inputs"), "timeout", "timed out after 1 s").record
    path = write_record(tmp_path, record)
    assert path.name == name_of(record) and json.loads(path.read_text()) == record


@pytest.mark.slow
@needs("torch")
def test_run_writes_the_profile_document_beside_a_record_that_never_holds_it(
        tmp_path: Path) -> None:
    done = parbench("run", "torch-single", "--steps", "6", "--global-batch", "32", "--dataset",
                    "digits", "--model", "mlp", "--profile", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    [record_file] = [p for p in tmp_path.glob("*.json") if not p.name.endswith(SUFFIX)]
    record = json.loads(record_file.read_text())
    profile = json.loads((tmp_path / record["profile"]["file"]).read_text())
    assert set(record) <= set(SCHEMA["properties"]) and list(record) == [*FIELDS, "profile"]
    assert list(record["metrics"])[-2:] == ["flops", "input"]
    assert (profile["record"], profile["run_id"]) == (record_file.name, record["run_id"])
    assert record["profile"] == summary(profile) and check_record(record) == []
