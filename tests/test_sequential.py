"""The stopping rule of `compare --until-ci H --budget MINUTES` (parbench.results.sequential):
its intervals, states and plan arithmetic on hand-made figures, and its error rates by
simulation at the noise this machine measured (benchmarks/sequential_rule.py prints the same
figures): an A/A comparison is called different in at most 5 % of sweeps, the naive rule's
rate is far above that (the reason for the rule), and a true 10 % difference is found in most
sweeps of the default budget."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from parbench.results.intervals import t_interval
from parbench.results.sequential import (
    ALPHA,
    DEFAULT_BUDGET_MINUTES,
    MAX_ROUNDS,
    SequentialPlan,
    Verdict,
    budget_seconds,
    check_half_width,
    look,
    look_level,
    rounds_that_fit,
    sweep_done,
    swept_interval,
    verdict,
)

ROOT = Path(__file__).resolve().parents[1]


def _benchmark(name: str):
    """A module of benchmarks/ (a folder of scripts, not a package), loaded once by its path."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


rule = _benchmark("sequential_rule")
SWEEPS = 20_000
# A rule whose true rate is 5 % shows more than 5 % + MARGIN in 1 of 1000 such simulations
# (binomial, normal approximation, one-sided z = 3.09): 0.48 points at 20,000 sweeps.
MARGIN = 3.09 * math.sqrt(ALPHA * (1 - ALPHA) / SWEEPS)


@pytest.fixture(scope="module")
def records() -> list[dict]:
    return rule.load(rule.RECORDS)


@pytest.fixture(scope="module")
def default_rounds(records) -> int:
    """The rounds of the headline sweep the default budget allows, timed from the records."""
    round_s = rule.round_seconds(records)
    return rounds_that_fit(budget_seconds(DEFAULT_BUDGET_MINUTES), round_s, round_s)


def test_the_simulated_noise_is_the_one_measured_on_the_reference_records(records):
    """Re-measuring the reference moves these figures: PAIRED_LOG_SD and the figures of
    docs/speed-method.md, "Deciding with paired rounds", go with them."""
    paired, unpaired, _ = rule.measured_noise(records)
    assert abs(paired.pooled - rule.PAIRED_LOG_SD) <= 0.1 * paired.pooled
    # pairing narrows the per-round spread on this machine, though not by much (0.158 / 0.182)
    assert paired.pooled < unpaired.pooled


def test_the_default_budget_is_the_rounds_that_fit_after_the_first(records, default_rounds):
    round_s = rule.round_seconds(records)  # 105.4 s for the reference: 25 rounds
    assert default_rounds == 1 + math.floor((DEFAULT_BUDGET_MINUTES * 60 - round_s) / round_s)


@pytest.mark.parametrize("max_rounds", [3, 4, 10, 25, MAX_ROUNDS])
def test_an_aa_comparison_is_called_different_in_at_most_alpha_of_sweeps(max_rounds):
    """Observed at 20,000 sweeps: 5.0, 4.5, 4.5, 4.7 and 5.0 % (3 rounds is the plain t)."""
    called = rule.simulate(max_rounds, look_level(max_rounds), 0.0, rule.PAIRED_LOG_SD,
                           SWEEPS).called
    assert called <= ALPHA + MARGIN


def test_heavy_tailed_noise_does_not_raise_the_aa_rate(default_rounds):
    """Student's t noise with 3 dof (the reference has a 2x outlier run): 3.3 % observed."""
    called = rule.simulate(default_rounds, look_level(default_rounds), 0.0, rule.PAIRED_LOG_SD,
                           SWEEPS, tails="t3").called
    assert called <= ALPHA + MARGIN


def test_the_naive_rule_calls_identical_configurations_different_far_too_often(default_rounds):
    """95 % at every look, stopping when decided: 24.5 % of A/A sweeps; why the rule exists."""
    called = rule.simulate(default_rounds, 0.95, 0.0, rule.PAIRED_LOG_SD, SWEEPS).called
    assert called - 3.09 * math.sqrt(called * (1 - called) / SWEEPS) > 2 * ALPHA


def test_a_true_ten_percent_difference_is_found_in_most_sweeps_of_the_default_budget(
        default_rounds):
    """63.5 % found, in the right direction, by the median round 15 of 25; Bonferroni over the
    looks would find 46 %."""
    level = look_level(default_rounds)
    found = rule.simulate(default_rounds, level, 0.10, rule.PAIRED_LOG_SD, SWEEPS, seed=2)
    assert found.right - MARGIN > 0.5
    assert found.called - found.right < 0.005  # a call in the wrong direction is rare
    bonferroni = 1 - ALPHA / SequentialPlan(default_rounds).looks
    assert rule.simulate(default_rounds, bonferroni, 0.10, rule.PAIRED_LOG_SD, SWEEPS,
                         seed=2).right < found.right


def test_the_vectorised_simulation_makes_the_calls_verdict_makes():
    plan = SequentialPlan(12)
    logs = math.log(1.05) + 0.1 * np.random.default_rng(3).standard_normal((150, 12))
    called, stop, sign = rule.first_calls(logs, plan.level)
    for k, sweep in enumerate(logs):
        states = [verdict(sweep[:n], plan, 0.001).state for n in range(3, 13)]
        assert ("decided" in states) == called[k]
        if called[k]:
            assert states.index("decided") + 3 == stop[k]
            assert (verdict(sweep[:stop[k]], plan, 0.001).ratio > 1) == (sign[k] > 0)
    assert 0 < called.sum() < len(logs)  # both kinds of sweep were compared


def test_the_level_lies_between_one_look_and_bonferroni_and_is_reproducible():
    levels = [look_level(n) for n in (3, 4, 10, 25, 60)]
    assert levels[0] == 1 - ALPHA
    assert levels == sorted(levels)
    for n, level in zip((4, 10, 25, 60), levels[1:]):
        assert 1 - ALPHA < level <= 1 - ALPHA / (n - 2)
    look_level.cache_clear()  # compare and the report, in two processes, compute the same
    assert look_level(25) == levels[3] == SequentialPlan(25).level


def test_one_look_is_the_reports_t_interval_of_the_ratios():
    ratios = [1.08, 0.97, 1.15]
    mine, reports = look(np.log(ratios), SequentialPlan(3)), t_interval(ratios)
    assert (mine.low, mine.high) == pytest.approx((reports.low, reports.high), rel=1e-12)
    assert swept_interval(np.log(ratios), 3) == mine
    assert mine.method == "sequential paired t, 3 of 3 rounds, 95.00% per look"


def test_a_comparison_is_decided_narrow_or_open():
    plan = SequentialPlan(10)
    faster = verdict([0.20, 0.21, 0.19, 0.20], plan, 0.05)
    assert faster.state == "decided" and faster.interval.low > 1
    assert faster.ratio == pytest.approx(math.exp(0.2))
    assert faster.why().startswith("decided: 1.22 (") and "after 4 rounds" in faster.why()
    tie = verdict([0.001, -0.001, 0.0005, -0.0005], plan, 0.05)
    assert tie.state == "narrow" and tie.interval.low < 1 < tie.interval.high
    assert tie.relative_half_width <= 0.05 and "<= 5%" in tie.why()
    unclear = verdict([0.1, -0.1, 0.05], plan, 0.05)
    assert unclear.state == "open" and "holds 1" in unclear.why()
    early = verdict([0.5, 0.5], plan, 0.05)
    assert early == Verdict("open", None, 2, 0.05) and "first look needs 3" in early.why()
    assert sweep_done([faster, tie]) and not sweep_done([faster, unclear])
    assert sweep_done([])  # nothing to decide


def test_a_look_refuses_rounds_the_plan_did_not_pay_for_and_figures_that_are_not_numbers():
    plan = SequentialPlan(4)
    with pytest.raises(ValueError, match="5 rounds, but the sweep planned at most 4"):
        verdict([0.1] * 5, plan, 0.05)
    with pytest.raises(ValueError, match="finite"):
        look([0.1, float("nan"), 0.2], plan)
    with pytest.raises(ValueError, match="first look needs 3"):
        look([0.1, 0.2], plan)


@pytest.mark.parametrize("rounds", [2, MAX_ROUNDS + 1, 3.0, True])
def test_a_plan_takes_3_to_max_rounds(rounds):
    with pytest.raises(ValueError, match="3 to 100 rounds"):
        SequentialPlan(rounds)


def test_a_plan_looks_after_every_round_from_the_third():
    assert SequentialPlan(3).looks == 1 and SequentialPlan(25).looks == 23
    with pytest.raises(ValueError, match="alpha"):
        SequentialPlan(10, alpha=0.0)


def test_the_budget_becomes_rounds():
    assert rounds_that_fit(2700, 105.4, 105.4) == 25
    assert rounds_that_fit(2700, 100, 350, rounds_done=3) == 3 + 23
    assert rounds_that_fit(36000, 5, 5) == MAX_ROUNDS
    with pytest.raises(ValueError) as refused:
        rounds_that_fit(300, 105.4, 105.4)
    assert str(refused.value) == ("a budget of 5.0 min is too small for three rounds: 1 round(s) "
                                  "used 1.8 min and each takes 1.8 min, so 2 fit")
    assert rounds_that_fit(300, 105.4, 400, rounds_done=3) == 3  # over budget: what is done
    for bad in [(0, 10, 0), (math.inf, 10, 0), (100, 0, 0), (100, 10, -1), (100, 10, math.nan)]:
        with pytest.raises(ValueError):
            rounds_that_fit(*bad)


@pytest.mark.parametrize("bad", [0, 1, -0.1, 1.5, math.nan, math.inf, "abc", None, True])
def test_a_half_width_outside_0_1_is_refused_in_one_line(bad):
    with pytest.raises(ValueError, match=r"^the half-width must be a number in \(0, 1\)") as no:
        check_half_width(bad)
    assert "\n" not in str(no.value)


@pytest.mark.parametrize("bad", [0, -5, math.nan, math.inf, "", "soon"])
def test_a_budget_that_is_not_a_positive_number_of_minutes_is_refused_in_one_line(bad):
    with pytest.raises(ValueError, match="^the budget must be a finite number of minutes") as no:
        budget_seconds(bad)
    assert "\n" not in str(no.value)


def test_good_cli_figures_pass():
    assert check_half_width("0.05") == 0.05 and budget_seconds("45") == 2700.0


@pytest.mark.parametrize("argv, says", [
    (["--sweeps", "5"], "--sweeps: expected a whole number from 100"),
    (["--cv", "-0.1"], "--cv: expected a standard deviation"),
    (["--difference", "-1"], "--difference: expected a relative difference above -1"),
    (["--budget", "nan"], "--budget: expected minutes above 0"),
    (["--budget", "2"], "too small for three rounds"),
    (["--records", "/nonexistent"], "no records in /nonexistent"),
])
def test_the_benchmark_refuses_bad_input_in_one_line(argv, says, capsys):
    try:
        code = rule.main(argv)
    except SystemExit as exit_:
        code = exit_.code
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and says in err and err.count("\n") == 1


def test_the_benchmark_prints_each_rule(capsys):
    assert rule.main(["--sweeps", "200"]) == 0
    out = capsys.readouterr().out
    assert "pairs: median" in out and "min budget fits" in out
    assert [line.split(",")[0] for line in out.splitlines()[-3:]] == \
        ["sequential (Pocock-type repeated t)", "Bonferroni over the looks", "naive"]
