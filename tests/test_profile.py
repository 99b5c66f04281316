"""`parbench run --profile`: the profile file next to the record (every rank, the four phases,
the framework profiler's top operations), a profiled run training exactly like a plain one,
the record marked and kept out of the performance tables, `check` not counting profile files,
and the backends and commands that refuse it. No assertion on how long anything took: only
that measured times are there, positive, and add up to each step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_report import markdown_tables, record

from conftest import needs, parbench
from parbench.run.profiling import PHASES, PROFILE_STEPS, SUFFIX, window

# the resnet on the 8x8 digits: every phase and operator a profile shows, at a 16th of the
# default 32x32 set's work
TINY = ("--steps", "10", "--global-batch", "32", "--dataset", "digits")


def train(backend: str, out: Path, *options: str) -> None:
    done = parbench("run", backend, *TINY, "--out", str(out), *options, timeout=600)
    assert done.returncode == 0, done.stderr


def plain_and_profiled(folder: Path) -> tuple[dict, dict, dict]:
    """(plain record, profiled record, its profile document) of a folder holding one each."""
    records = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))
               if not p.name.endswith(SUFFIX)]
    assert len(records) == 2
    plain, profiled = sorted(records, key=lambda r: "profile" in r["variant"])
    return plain, profiled, json.loads((folder / profiled["profile"]["file"]).read_text())


def rows_of(report: str, section: str | None = None, caption: str | None = None) -> list[dict]:
    """The rows of the one table of a Markdown report with that section and/or caption."""
    [rows] = [rows for (s, c), rows in markdown_tables(report).items()
              if section in (None, s) and caption in (None, c)]
    return rows


def assert_phases_make_up_the_step(rank: dict) -> None:
    """Each profiled step's forward + backward + optimizer is the step: torch and Paddle clock
    them back to back inside the step; TensorFlow times separately compiled functions apart
    and takes the optimizer as the step less the gradients' time, each difference clamped at
    0, so a clamped step's phases can only add up to more (communication overlaps backward,
    or is timed apart: it is never added)."""
    steps = rank["per_step_ms"]
    for i, step in enumerate(steps["step"]):
        parts = [steps[phase][i] for phase in ("forward", "backward", "optimizer")]
        if all(part > 0 for part in parts):
            assert sum(parts) == pytest.approx(step, rel=1e-9), (i, parts, step)
        else:
            assert sum(parts) >= step * (1 - 1e-9), (i, parts, step)


def test_the_window_is_steady_steps_capped_and_inside_one_epoch() -> None:
    assert window(total_steps=10, warmup=1, per_epoch=128) == [1, 10]
    assert window(total_steps=64, warmup=5, per_epoch=128) == [5, 5 + PROFILE_STEPS]
    assert window(total_steps=64, warmup=5, per_epoch=8) == [5, 8]  # epoch 0 ends at step 7
    assert window(total_steps=1, warmup=0, per_epoch=128) == [0, 1]


def profiled_record(repeat: int, forward: float, communication: float | None) -> dict:
    """A valid record of a profiled torch-ddp x2 run with hand-set phase medians."""
    rec = record("torch-ddp", "torch", 2, repeat, 900.0, launcher="torchrun")
    rec["variant"] = {"threads": 1, "nnodes": 1, "profile": True}
    rec["profile"] = {
        "file": f"p{repeat}{SUFFIX}", "tool": "torch.profiler", "steps": {"first": 1, "count": 9},
        "slowest_rank": 1, "median_ms": {"forward": forward, "backward": 20.0, "optimizer": 1.0,
                                         "communication": communication, "step": 31.0},
        "top_ops": [{"name": f"op{repeat}", "self_ms_per_step": 7.5}]}
    return rec


def test_report_keeps_profiled_runs_out_of_the_tables_and_shows_their_phases(
        tmp_path: Path) -> None:
    runs = [record("torch-ddp", "torch", 2, 0, 1000.0, launcher="torchrun"),
            profiled_record(0, 8.0, 2.0), profiled_record(1, 12.0, 4.0)]
    for i, rec in enumerate(runs):
        (tmp_path / f"{i}.json").write_text(json.dumps(rec))
    (tmp_path / f"0{SUFFIX}").write_text("{}")  # a profile file is not a record
    checked = parbench("check", str(tmp_path))
    assert checked.returncode == 0 and "3 record(s) checked, 0 problem(s)" in checked.stdout
    done = parbench("report", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert [(r["backend"], r["runs"], r["samples/s"])
            for r in rows_of(done.stdout, caption="Performance")] == \
        [("torch-ddp", "1/1", "1000")]  # the profiled repeats (900 samples/s) are not in it
    [row] = rows_of(done.stdout, section="Profiles")
    assert (row["backend"], row["devices"], row["runs"]) == ("torch-ddp", "2", "2/2")
    assert (row["forward ms"], row["communication ms"], row["step ms"]) == ("10", "3", "31")
    assert row["top ops (ms/step)"] == "op0 7.5"  # the first repeat's


@pytest.fixture(scope="module")  # two 2-process runs: shared by the three tests below
def ddp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("ddp")
    train("torch-ddp", folder, "--devices", "2")
    train("torch-ddp", folder, "--devices", "2", "--profile")
    return folder


@pytest.mark.slow
@needs("torch")
def test_ddp_profile_has_both_ranks_every_phase_and_the_all_reduce(ddp: Path) -> None:
    plain, profiled, profile = plain_and_profiled(ddp)
    assert profiled["variant"] == {**plain["variant"], "profile": True}
    assert (ddp / profile["record"]).is_file() and profile["world_size"] == 2
    assert Path(profile["record"]).stem + SUFFIX == profiled["profile"]["file"]
    assert profile["steps"] == {"first": 1, "count": 9}  # steps 1..9 of 10: after the warm-up
    assert [r["rank"] for r in profile["ranks"]] == [0, 1]
    for rank in profile["ranks"]:
        assert all(rank["median_ms"][phase] > 0 for phase in PHASES), rank["median_ms"]
        assert rank["share_of_step"]["communication"] > 0
        assert_phases_make_up_the_step(rank)
        assert all(len(rank["per_step_ms"][phase]) == 9 for phase in (*PHASES, "step"))
        assert rank["top_ops"] and all(op["self_ms"] > 0 for op in rank["top_ops"])
    assert "overlaps backward" in profile["phases"]["communication"]
    slowest = profile["ranks"][profile["slowest_rank"]]
    assert profiled["profile"]["median_ms"] == slowest["median_ms"]


@pytest.mark.slow
@needs("torch")
def test_profiled_ddp_trains_exactly_like_a_plain_run(ddp: Path) -> None:
    plain, profiled, _ = plain_and_profiled(ddp)  # the comm hook does DDP's own arithmetic
    assert profiled["metrics"]["loss_curve"] == plain["metrics"]["loss_curve"]
    assert profiled["metrics"]["final_loss"] == plain["metrics"]["final_loss"]


@pytest.mark.slow
@needs("torch")
def test_check_skips_the_profile_file_and_report_keeps_the_run_apart(ddp: Path) -> None:
    checked = parbench("check", str(ddp))
    assert checked.returncode == 0 and "2 record(s) checked, 0 problem(s)" in checked.stdout
    done = parbench("report", str(ddp))
    assert done.returncode == 0, done.stderr
    assert [(r["backend"], r["runs"]) for r in rows_of(done.stdout, caption="Performance")] \
        == [("torch-ddp", "1/1")]
    [row] = rows_of(done.stdout, section="Profiles")
    assert float(row["communication ms"]) > 0 and row["top ops (ms/step)"] != "-"


@pytest.mark.slow
@pytest.mark.parametrize("backend", [pytest.param("tf-single", marks=needs("tensorflow")),
                                     pytest.param("paddle-single", marks=needs("paddle"))])
def test_single_device_profile_and_an_unchanged_training(backend: str, tmp_path: Path) -> None:
    train(backend, tmp_path)
    train(backend, tmp_path, "--profile")
    plain, profiled, profile = plain_and_profiled(tmp_path)
    [rank] = profile["ranks"]
    assert rank["median_ms"]["communication"] is None  # one device: nothing to communicate
    assert all(rank["median_ms"][p] > 0 for p in ("forward", "backward", "step"))
    assert_phases_make_up_the_step(rank)
    assert rank["top_ops"] and all(op["self_ms"] > 0 for op in rank["top_ops"])
    # the extra timing (TensorFlow: extra compiled functions) changed no weight nor statistic
    assert profiled["metrics"]["loss_curve"] == plain["metrics"]["loss_curve"]
    assert profiled["metrics"]["final_loss"] == plain["metrics"]["final_loss"]


@pytest.mark.parametrize("command", [("run", "tf-mirrored-keras"), ("compare", "torch-single")])
def test_profile_is_refused_where_it_cannot_mean_anything(command: tuple[str, str],
                                                          tmp_path: Path) -> None:
    done = parbench(*command, "--profile", *TINY, "--out", str(tmp_path / "out"),
                    *(["--report-dir", str(tmp_path / "report")] if command[0] == "compare"
                      else []))
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "--profile" in done.stderr
    assert not any((tmp_path / "out").glob("*.json"))


@pytest.mark.slow
@pytest.mark.parametrize("backend", [
    pytest.param("torch-single", marks=needs("torch")),
    pytest.param("tf-single", marks=needs("tensorflow")),
    pytest.param("paddle-single", marks=needs("paddle")),
])
def test_a_profiled_first_step_still_reports_what_the_step_computed(tmp_path, backend):
    """With --steps 1 the profiler takes step 0, the step the run-mode check reads: the
    profiled step must report its dtype and micro-batches like the plain one (it did not in
    torch, and the run failed)."""
    out = tmp_path / "out"
    done = parbench("run", backend, "--profile", "--steps", "1", "--dataset", "digits",
                    "--global-batch", "32", "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    (path,) = [p for p in out.glob("*.json") if not p.name.endswith(SUFFIX)]
    metrics = json.loads(path.read_text())["metrics"]
    assert (metrics["compute_dtype"], metrics["micro_batches"]) == ("float32", 1)
