"""A run whose loss becomes NaN or infinite stops at that step with status diverged, in every
framework (an lr of 1e6 on the mlp diverges within a few steps in each): every rank stops at
the same step (a multi-process run would otherwise hang in its next all-reduce), the record
says where, it carries no figures, and the report lists it apart from every table of figures;
compare goes on with the next configuration."""

from __future__ import annotations

import pytest

from conftest import needs, parbench, records_in
from parbench.results.records import check_record

DIVERGING = ("--dataset", "digits", "--model", "mlp", "--lr", "1e6", "--schedule", "constant",
             "--global-batch", "32", "--steps", "12")


def diverged_record(folder, backend: str, *args: str) -> dict:
    out = folder / "out"
    done = parbench("run", backend, *DIVERGING, *args, "--out", str(out), cwd=folder)
    assert done.returncode == 1, done.stderr[-3000:]  # not ok: the exit code says so
    (record,) = records_in(out)
    assert check_record(record) == []
    return record


def assert_stopped_where_the_loss_broke(record: dict) -> None:
    assert record["status"] == "diverged", record["error"]
    stop = record["diverged"]
    assert stop["loss"] in ("nan", "inf", "-inf")
    assert 0 <= stop["step"] < record["steps"] == 12  # it stopped before the planned end
    assert record["metrics"] is None  # no speed or accuracy to put in a table
    assert record["error"].startswith(f"diverged at step {stop['step']}: rank {stop['rank']}")


@pytest.mark.parametrize("backend,args", [
    pytest.param("torch-single", (), marks=[needs("torch"), pytest.mark.slow]),
    pytest.param("torch-ddp", ("--devices", "2"), marks=[needs("torch"), pytest.mark.slow]),
    pytest.param("tf-single", (), marks=[needs("tensorflow"), pytest.mark.slow]),
    pytest.param("tf-mirrored-keras", ("--devices", "2"),
                 marks=[needs("tensorflow"), pytest.mark.slow]),
    pytest.param("paddle-single", (), marks=[needs("paddle"), pytest.mark.slow]),
    pytest.param("paddle-launch", ("--devices", "2"), marks=[needs("paddle"), pytest.mark.slow]),
    pytest.param("jax-single", (), marks=[needs("jax"), pytest.mark.slow]),
])
def test_a_diverging_run_stops_with_status_diverged(tmp_path, backend, args):
    record = diverged_record(tmp_path, backend, *args)
    assert_stopped_where_the_loss_broke(record)
    report = parbench("report", str(tmp_path / "out"))
    assert report.returncode == 0, report.stderr
    diverged = report.stdout.split("\n## Diverged runs", 1)
    assert len(diverged) == 2 and backend in diverged[1].split("\n## ")[0]
    assert "### Performance" not in report.stdout  # its figures are in no table


@pytest.mark.slow
@needs("torch")
@needs("jax")
def test_compare_goes_on_after_a_diverged_configuration(tmp_path):
    out = tmp_path / "runs"
    done = parbench("compare", "torch-single", "jax-single", "--devices", "1", *DIVERGING,
                    "--out", str(out), "--report-dir", str(tmp_path / "report"), cwd=tmp_path)
    assert done.returncode == 1, done.stderr[-3000:]
    statuses = {r["backend"]: r["status"] for r in records_in(out)}
    assert statuses == {"torch-single": "diverged", "jax-single": "diverged"}
    assert "## Diverged runs" in (tmp_path / "report" / "report.md").read_text()
