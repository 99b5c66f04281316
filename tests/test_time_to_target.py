"""Time to target, as MLPerf times training: --target stops a run at the first evaluation
that reaches it, on every rank at the same step, in a custom loop and in Keras' fit alike; the
target changes nothing before that evaluation; the clock starts at the first touch of training
data and counts evaluations; a target never reached is recorded as not reached.

The mlp on the synthetic images, 40 steps of 32 rows, an evaluation every 4: its test accuracy
passes 0.9 at step 24 (0.83 at step 20, 0.95 at 24 on torch-single), a margin that the
frameworks' proven agreement (tests/test_trajectories.py) keeps far from the edge."""

from __future__ import annotations

import json

import pytest

from conftest import needs, parbench, run_ok

pytestmark = pytest.mark.slow
TRAINING = ["--model", "mlp", "--steps", "40", "--global-batch", "32", "--eval-every", "4"]
REACHED_AT = 24


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, dict]:
    folder = tmp_path_factory.mktemp("to-target")
    cases = {"stopped": ("torch-single", "--target", "0.9"),
             # a loss no model reaches on this data: the run trains its whole budget
             "not reached": ("torch-single", "--target", "1e-6", "--target-metric", "loss")}
    done = {}
    for name, args in cases.items():
        (folder / name.replace(" ", "-")).mkdir()
        done[name] = run_ok(folder / name.replace(" ", "-"), *args, *TRAINING)
    return done


@needs("torch")
def test_the_run_stops_at_the_first_evaluation_that_reaches_the_target(runs):
    stopped, full = runs["stopped"]["metrics"], runs["not reached"]["metrics"]
    target = stopped["target"]
    assert target == {"metric": "accuracy", "value": 0.9, "better": "higher",
                      "evaluations": REACHED_AT // 4, "reached": True,
                      "time_s": target["time_s"], "steps": REACHED_AT,
                      "items": REACHED_AT * 32}
    assert len(stopped["loss_curve"]) == REACHED_AT  # no step after the target
    # the evaluation before it had not reached it, and nothing before it changed
    assert stopped["accuracy_curve"][-2]["accuracy"] < 0.9 <= stopped["final_accuracy"]
    assert [e["accuracy"] for e in stopped["accuracy_curve"]] == [
        e["accuracy"] for e in full["accuracy_curve"][:REACHED_AT // 4]]
    assert stopped["loss_curve"] == full["loss_curve"][:REACHED_AT]


@needs("torch")
def test_the_clock_starts_at_the_data_and_counts_the_evaluations(runs):
    record = runs["stopped"]
    metrics = record["metrics"]
    last = metrics["accuracy_curve"][-1]
    assert metrics["target"]["time_s"] == metrics["time_to_target_s"] == last["wall_s"]
    # the step times and every evaluation up to the target are on the clock ...
    assert last["wall_s"] > last["train_s"] + sum(e["eval_s"] for e in metrics["accuracy_curve"])
    # ... and start-up is not: it is recorded apart
    assert metrics["startup_s"] > 0
    assert last["wall_s"] + metrics["startup_s"] < record["duration_s"]
    walls = [e["wall_s"] for e in metrics["accuracy_curve"]]
    assert walls == sorted(walls)


@needs("torch")
def test_a_target_never_reached_is_recorded_as_not_reached(runs):
    metrics = runs["not reached"]["metrics"]
    assert len(metrics["loss_curve"]) == 40 and len(metrics["accuracy_curve"]) == 10
    assert metrics["target"] == {"metric": "loss", "value": 1e-6, "better": "lower",
                                 "evaluations": 10, "reached": False, "time_s": None,
                                 "steps": None, "items": None}
    assert metrics["time_to_target_s"] is None


@pytest.mark.parametrize("backend", [
    pytest.param("torch-ddp", marks=needs("torch")),
    pytest.param("tf-mirrored-keras", marks=needs("tensorflow")),  # fit stops through a callback
])
def test_every_rank_stops_at_the_same_step(tmp_path, backend):
    record = run_ok(tmp_path, backend, "--devices", "2", "--target", "0.9", *TRAINING)
    metrics = record["metrics"]
    # the ranks' step logs are joined step by step: ranks that stopped apart fail the run
    assert metrics["target"]["reached"] and metrics["target"]["steps"] == REACHED_AT
    assert len(metrics["loss_curve"]) == REACHED_AT
    assert record["metrics"]["input"]["epochs"][0]["steps"] == REACHED_AT


@needs("torch")
def test_the_report_shows_the_time_to_target_and_the_headline_says_who_was_first(runs,
                                                                               tmp_path):
    folder = tmp_path / "both"
    folder.mkdir()
    for name, record in runs.items():
        (folder / f"{name.replace(' ', '-')}.json").write_text(json.dumps(record))
    report = parbench("report", str(folder))
    assert report.returncode == 0, report.stderr
    headline, table = report.stdout.split("\n## Time to target\n")[:2]
    assert "Time to target: mlp on synthetic, accuracy >= 0.9, every 4 steps, 1 device(s): " \
           "torch-single first in" in headline
    assert "| 1/1 " in table and "768 samples" in table  # the run that reached it: 24 x 32
    assert "loss <= 1e-06, every 4 steps" in table and "not reached" in table
