"""A run whose loss becomes NaN or infinite stops at that step with status diverged, in every
framework (an lr of 1e6 on the mlp diverges within a few steps in each): every rank stops at
the same step (a multi-process run would otherwise hang in its next all-reduce), the record
says where, it carries no figures, and the report lists it apart from every table of figures;
compare goes on with the next configuration.

A real divergence breaks every rank at once (the averaged gradient is the same everywhere), so
it cannot show that the ranks decide together. A sitecustomize module on PYTHONPATH does: it
makes the loss one rank reports at one step NaN, after the real step (its collectives) ran,
while the model and every other rank's loss stay finite; and counts the steps each rank took."""

from __future__ import annotations

import os
from pathlib import Path

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
    pytest.param("torch-fsdp", ("--devices", "2"), marks=[needs("torch"), pytest.mark.slow]),
    pytest.param("tf-single", (), marks=[needs("tensorflow"), pytest.mark.slow]),
    pytest.param("tf-mirrored-keras", ("--devices", "2"),
                 marks=[needs("tensorflow"), pytest.mark.slow]),
    pytest.param("tf-multiworker", ("--devices", "2"),
                 marks=[needs("tensorflow"), pytest.mark.slow]),
    pytest.param("paddle-single", (), marks=[needs("paddle"), pytest.mark.slow]),
    pytest.param("paddle-launch", ("--devices", "2"), marks=[needs("paddle"), pytest.mark.slow]),
    pytest.param("jax-single", (), marks=[needs("jax"), pytest.mark.slow]),
    pytest.param("jax-multiprocess", ("--devices", "2"), marks=[needs("jax"), pytest.mark.slow]),
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


# --- one rank's loss not finite, the others' finite
ONE_RANK_NAN = '''
import os
from pathlib import Path

if os.environ.get("ONE_RANK_NAN"):
    from parbench.run import loop

    nan_rank, nan_step, folder = os.environ["ONE_RANK_NAN"].split(":", 2)
    trained = loop._train

    def _train(job, strategy):
        step, taken = strategy.train_step, []

        def train_step(x, y, lr):
            loss = step(x, y, lr)  # the real step: every rank joins its collectives
            taken.append(len(taken))
            Path(folder, f"rank{strategy.rank}").write_text(str(len(taken)))
            if (strategy.rank, taken[-1]) == (int(nan_rank), int(nan_step)):
                return float("nan")
            return loss

        strategy.train_step = train_step
        return trained(job, strategy)

    loop._train = _train
'''
NAN_RANK, NAN_STEP, STEPS = 1, 2, 6


@pytest.mark.parametrize("backend", [
    # one backend per implementation of the all-reduce the loop decides with (all_reduce_sum;
    # torch-fsdp shares torch-ddp's process group, paddle-spawn paddle-launch's)
    pytest.param("torch-ddp", marks=[needs("torch"), pytest.mark.slow]),
    pytest.param("tf-multiworker", marks=[needs("tensorflow"), pytest.mark.slow]),
    pytest.param("paddle-launch", marks=[needs("paddle"), pytest.mark.slow]),
    pytest.param("jax-multiprocess", marks=[needs("jax"), pytest.mark.slow]),
])
def test_a_loss_not_finite_on_one_rank_stops_every_rank_at_that_step(tmp_path, backend):
    """Rank 1's loss is NaN at step 2, rank 0's finite: both stop after step 2 (a rank that
    went on alone would wait in its next step's all-reduce until the run's timeout), the run is
    diverged, and the record names rank 1, not the first rank."""
    (tmp_path / "sitecustomize.py").write_text(ONE_RANK_NAN)
    steps = tmp_path / "steps"
    steps.mkdir()
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)
    out = tmp_path / "out"
    done = parbench("run", backend, "--devices", "2", "--dataset", "digits", "--model", "mlp",
                    "--global-batch", "32", "--steps", str(STEPS), "--timeout", "120",
                    "--out", str(out), cwd=tmp_path,
                    env={"PYTHONPATH": path, "ONE_RANK_NAN": f"{NAN_RANK}:{NAN_STEP}:{steps}"})
    assert done.returncode == 1, done.stderr[-3000:]
    (record,) = records_in(out)
    assert check_record(record) == []
    assert record["status"] == "diverged", record["error"]
    assert record["diverged"] == {"step": NAN_STEP, "rank": NAN_RANK, "loss": "nan"}
    assert record["error"] == f"diverged at step {NAN_STEP}: rank {NAN_RANK}'s loss was nan"
    assert record["metrics"] is None
    taken = {p.name: int(p.read_text()) for p in Path(steps).iterdir()}
    assert taken == {"rank0": NAN_STEP + 1, "rank1": NAN_STEP + 1}  # every rank, same step
