"""compare --until-ci H --budget MINUTES: bad input refused before anything runs; the headline
pairs of a sweep judged by the sequential rule from its records; and a real sweep whose budget
is too small for three rounds, kept and resumed with a larger one, stopping when its (no)
comparisons are clear."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from test_report import record

from conftest import needs, parbench, records_in
from parbench.cli.sweep_state import SWEEP_STATE
from parbench.cli.until_clear import UntilClear, comparisons
from parbench.results.sequential import SequentialPlan, verdict

QUICK = ["compare", "torch-single", "--devices", "1", "--steps", "2", "--global-batch", "32",
         "--model", "mlp"]


# each check's every bad value is tested on the check itself (tests/test_sequential.py); here
# one of each reaches the command line
@pytest.mark.parametrize("flags,message", [
    (["--until-ci", "1"], "the half-width must be a number in (0, 1)"),
    (["--until-ci", "0.05", "--budget", "-3"], "the budget must be a finite number of minutes"),
    (["--budget", "5"], "--budget goes with --until-ci H"),
    (["--until-ci", "0.05", "--repeats", "3"], "--repeats or --until-ci"),
])
def test_bad_input_is_one_line_and_exit_2_with_nothing_written(tmp_path, flags, message):
    done = parbench(*QUICK, *flags, "--out", str(tmp_path / "out"),
                    "--report-dir", str(tmp_path / "report"))
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists() and not (tmp_path / "report").exists()


def _sweep_of_two_frameworks(folder, ratios: list[float]) -> None:
    """torch-single and tf-single at 1 device, one record each per round, tf's throughput the
    given ratio of torch's while both move with the machine's drift."""
    folder.mkdir()
    drift = np.linspace(0.8, 1.2, len(ratios))
    for i, (r, d) in enumerate(zip(ratios, drift)):
        for backend, framework, speed in (("torch-single", "torch", 100 * d),
                                          ("tf-single", "tensorflow", 100 * d * r)):
            rec = record(backend, framework, 1, i, speed)
            rec["sweep"] = {"id": "s", "order_seed": 0, "position": 0, "max_rounds": 10}
            (folder / f"{backend}-{i}.json").write_text(json.dumps(rec))


def test_each_headline_pair_of_the_sweep_is_judged_by_the_sequential_rule(tmp_path):
    ratios = [1.30, 1.25, 1.35, 1.28]
    _sweep_of_two_frameworks(tmp_path / "runs", ratios)
    plan = SequentialPlan(10)
    found = comparisons(tmp_path / "runs", "s", plan, 0.01)
    (name, judged), = found.items()
    assert name == "1 device(s): tensorflow vs torch"
    # the pair, in headline order (fastest first): tf / torch, one ratio per round
    expected = verdict([math.log(r) for r in ratios], plan, 0.01)
    assert judged.state == expected.state == "decided" and judged.rounds == 4
    assert (judged.interval.low, judged.interval.high) == pytest.approx(
        (expected.interval.low, expected.interval.high), rel=1e-12)
    assert comparisons(tmp_path / "runs", "another sweep", plan, 0.01) == {}


def test_the_rule_stops_when_no_comparison_is_open_or_at_its_last_round(tmp_path, capsys):
    _sweep_of_two_frameworks(tmp_path / "runs", [1.0, 1.3, 0.8, 1.1])
    rule = UntilClear(0.01, 600.0, tmp_path / "runs", "s", max_rounds=10)
    assert rule.after_round(1) is False  # no look before the third round
    assert rule.after_round(3) is False  # a tie wider than 1 %: still open
    assert "round 4 of at most 10: 0 of 1 headline comparisons clear" in capsys.readouterr().err
    assert rule.summary()[0].startswith("left open at the end of the budget: 1 device(s): ")
    assert ": open: " in rule.summary()[0]
    assert rule.after_round(9) is True  # the last planned round ends it anyway
    # rounds that slowed down: another one like the last would overrun the 600 s budget
    assert rule.after_round(5, round_s=100.0, spent_s=450.0) is False
    assert rule.after_round(5, round_s=100.0, spent_s=520.0) is True
    assert "the budget has no room for another round" in capsys.readouterr().err
    assert rule.after_round(0, round_s=100.0, spent_s=590.0) is True  # before any look, too
    wide = UntilClear(0.9, 600.0, tmp_path / "runs", "s", max_rounds=10)
    assert wide.after_round(3) is True and wide.summary() == [
        "every headline comparison is clear (decided, or within 90%)"]


@pytest.mark.slow
@needs("torch")
def test_a_budget_too_small_keeps_its_round_and_resumes_with_a_larger_one(tmp_path):
    out = tmp_path / "out"
    args = [*QUICK, "--until-ci", "0.5", "--out", str(out), "--report-dir",
            str(tmp_path / "report")]
    small = parbench(*args, "--budget", "0.01")
    assert small.returncode == 2, small.stderr
    assert "is too small for three rounds" in small.stderr
    assert "its records are kept" in small.stderr
    (first,) = records_in(out)
    assert first["status"] == "ok" and "max_rounds" not in first["sweep"]
    resumed = parbench(*args, "--budget", "5", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    records = sorted(records_in(out), key=lambda r: r["repeat"])
    assert [r["repeat"] for r in records] == [0, 1, 2]  # 3 rounds: the first look, and done
    assert len({r["sweep"]["id"] for r in records}) == 1
    planned = json.loads((out / SWEEP_STATE).read_text())["max_rounds"]
    assert planned >= 3 and all(r["sweep"]["max_rounds"] == planned for r in records[1:])
    assert "[1] torch-single x1 round 1: kept" in resumed.stderr
    assert f"round 3 of at most {planned}: 0 of 0 headline comparisons clear" in resumed.stderr
    assert "every headline comparison is clear" in resumed.stderr
