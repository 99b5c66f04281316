"""What the report may call faster, and how it states scaling: 95% intervals (t over repeats,
a bootstrap of steps where repeats are few), the headline's ranking with ties where intervals
overlap, the shared-cores note with its fair reference, and the provenance lines. Every
figure is computed here by hand from hand-made records."""

from __future__ import annotations

import math

import pytest
from scipy import stats
from test_report import BATCH, markdown_tables, record

from parbench.results.intervals import bootstrap_step_interval, ratio, t_interval
from parbench.results.report import render

TITLE = ("spec aaaaaaaaaa: model resnet, dataset synthetic, global batch 128 (global batch "
         "fixed), 4 steps, lr 0.05, seed 0")


def on_cpu(rec: dict, threads: int, cores: int = 2) -> dict:
    """A record whose devices are CPU devices of one machine with ``cores`` cores."""
    rec["env"].update(device_names=["cpu"] * rec["world_size"], cores=cores,
                      threads_per_worker=threads)
    return rec


def repeats(backend: str, framework: str, devices: int, speeds: list[float], **kw) -> list[dict]:
    return [record(backend, framework, devices, i, speed, **kw) for i, speed in enumerate(speeds)]


def headline(records: list[dict]) -> list[dict[str, str]]:
    return markdown_tables(render(records))[("Headline", TITLE)]


def test_t_interval_is_students_on_the_logs_and_a_ratio_adds_half_widths() -> None:
    values = [100.0, 110.0, 120.0]
    logs = [math.log(v) for v in values]
    mean = sum(logs) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 2)
    half = 4.302652729911275 * sd / math.sqrt(3)  # t(0.975, 2 degrees of freedom)
    found = t_interval(values)
    assert (found.low, found.high) == pytest.approx((math.exp(mean - half),
                                                     math.exp(mean + half)), rel=1e-9)
    assert found.method == "t, 3 repeats"
    twice = t_interval([2 * v for v in values])
    versus = ratio(220.0, twice, 110.0, found)
    assert versus.value == 2.0
    assert math.log(versus.interval.high / 2.0) == pytest.approx(math.sqrt(2) * half)


def test_bootstrap_of_steps_brackets_the_median_and_narrows_with_more_steps() -> None:
    steady = [10.0, 11.0, 12.0, 10.5, 11.5, 30.0, 10.2, 11.1]
    few = bootstrap_step_interval([steady])
    assert few.low <= 11.05 <= few.high  # the median step
    assert min(steady) <= few.low and few.high <= max(steady)
    assert few.method == "bootstrap, 8 steps of 1 run(s)"
    many = bootstrap_step_interval([steady * 8])
    assert many.high - many.low < few.high - few.low
    constant = bootstrap_step_interval([[5.0] * 6])
    assert (constant.low, constant.high) == pytest.approx((5.0, 5.0), rel=1e-12)


def test_the_bootstrap_is_of_each_runs_median_and_their_geometric_mean() -> None:
    """15 steps of 10 ms and one of 1000 ms: a resample's median is 10 unless 8 of its 16 draws
    are the slow step (probability 2e-6), so every resampled median is 10 and so is the
    interval; a bootstrap of the mean would reach ~200 (3 or more slow draws in 16 happen 7%
    of the time). Two runs of constant steps, 10 and 40 ms: the geometric mean of their
    medians, 20 (their arithmetic mean would be 25)."""
    outlier = bootstrap_step_interval([[10.0] * 15 + [1000.0]])
    assert (outlier.low, outlier.high) == pytest.approx((10.0, 10.0), rel=1e-12)
    two = bootstrap_step_interval([[10.0] * 9, [40.0] * 9])
    assert (two.low, two.high) == pytest.approx((20.0, 20.0), rel=1e-12)
    assert two.method == "bootstrap, 9/9 steps of 2 run(s)"


def test_the_bootstrap_interval_is_95_percent() -> None:
    """17 distinct steps v1 < ... < v17 (10..26 ms). A resample's median is the 9th of 17
    draws, so P(median <= vj) = P(Binomial(17, j/17) >= 9), exactly: 0.0082 at v4, 0.0356 at
    v5, 0.1041 at v6. The 2.5% quantile is therefore v5 (14 ms) and, by symmetry, the 97.5%
    one v13 (22 ms); a 90% interval would end at v6 and v12 (5% quantiles), a bootstrap of the
    mean at neither. Of the 2000 resampled medians (seed 0), 67 are <= v5 and 61 >= v13, so
    the 50th and 51st from each end (np.percentile's 2.5%) lie on those steps with room to
    spare."""
    steps = [float(v) for v in range(10, 27)]
    below = [stats.binom.sf(8, 17, j / 17) for j in (4, 5, 6)]  # P(median <= v4, v5, v6)
    assert below[0] < 0.025 < below[1] < 0.05 < below[2]
    found = bootstrap_step_interval([steps])
    assert (found.low, found.high) == pytest.approx((14.0, 22.0), rel=1e-12)


def test_one_repeat_of_schema_10_gets_a_bootstrap_interval_in_the_performance_table() -> None:
    one = record("torch-single", "torch", 1, 0, 100.0)
    step = BATCH / 100.0 * 1000
    one["metrics"]["steady_step_ms"] = [step, step * 1.1, step * 0.9, step, step * 1.05]
    text = render([one])
    performance = markdown_tables(text)[(TITLE, "Performance")][0]
    low, high = (float(v) for v in performance["samples/s 95% CI"].split("-"))
    assert low < 100.0 < high and "CI method bootstrap, 5 steps of 1 run(s)" in text
    # within the fastest and slowest step's speeds (3 significant digits shown)
    assert 100 / 1.1 == pytest.approx(low, rel=1e-3) or 100 / 1.1 < low
    assert high <= 100 / 0.9


def test_frameworks_within_noise_tie_and_one_beyond_it_ranks_below() -> None:
    records = [*repeats("torch-ddp", "torch", 2, [100.0, 102.0, 104.0], launcher="torchrun"),
               *repeats("torch-dp", "torch", 2, [99.0, 101.0, 103.0]),
               *repeats("tf-mirrored", "tensorflow", 2, [101.0, 103.0, 105.0]),
               *repeats("paddle-launch", "paddle", 2, [50.0, 51.0, 52.0],
                        launcher="paddle-launch")]
    lines = headline(records)
    # the two that tie share rank 1; paddle, below both, is third
    assert [(r["rank"], r["framework"], r["approach"]) for r in lines] == [
        ("=1", "tensorflow", "tf-mirrored"), ("=1", "torch", "torch-ddp [torchrun]"),
        ("3", "paddle", "paddle-launch")]
    # torch-dp, not torch's representative, is set against torch-ddp in a table of its own
    others = markdown_tables(render(records))[
        ("Other approaches against their framework's representative", TITLE)]
    assert [(r["approach"], r["representative"], r["tie"]) for r in others] == [
        ("torch-dp", "torch-ddp [torchrun]", "yes")]
    # 51 / 103: both intervals known, so the ratio has one, and it stays below 1
    paddle = lines[2]["vs fastest"]
    assert paddle.startswith("0.495 (") and float(paddle[7:].split("-")[1].rstrip(")")) < 1
    assert "- Ties at 2 device(s): tensorflow = torch." in render(records)


def test_devices_sharing_cores_are_said_and_compared_with_the_single_at_the_same_threads():
    single = [on_cpu(r, threads=2) for r in repeats("torch-single", "torch", 1,
                                                      [100.0, 100.0, 100.0])]
    ddp = [on_cpu(r, threads=1) for r in repeats("torch-ddp", "torch", 2, [90.0, 90.0, 90.0],
                                                   launcher="torchrun")]
    line = {r["devices"]: r for r in headline(single + ddp)}["2"]
    # 90 / (2 x 100) against N x one device; 90 / 100 against the single given both threads
    assert (line["scaling eff."], line["shared cores"], line["vs 1-dev, same threads"]) == (
        "0.45 (0.45-0.45)", "2", "0.9 (0.9-0.9)")
    performance = {r["devices"]: r for r in markdown_tables(render(single + ddp))[
        (TITLE, "Performance")]}
    assert performance["2"]["vs single same threads"] == "0.9"


def test_no_fair_reference_where_the_devices_do_not_share_cores() -> None:
    single = repeats("torch-single", "torch", 1, [100.0, 100.0, 100.0])
    gpus = repeats("torch-ddp", "torch", 2, [190.0, 190.0, 190.0], launcher="torchrun",
                   device_mb=[900.0, 900.0])
    assert "shared cores" not in headline(single + gpus)[0]
    # CPU devices whose single ran with 8 threads, not their 2 x 2: no fair reference
    cpu = [on_cpu(r, threads=2, cores=8) for r in repeats("torch-ddp", "torch", 2,
                                                            [190.0] * 3, launcher="torchrun")]
    line = {r["devices"]: r for r in headline(single + cpu)}["2"]
    assert (line["shared cores"], line["vs 1-dev, same threads"]) == ("8", "-")


def test_mixed_commits_schemas_and_versions_are_said_in_the_headline() -> None:
    records = repeats("torch-single", "torch", 1, [100.0, 100.0, 100.0])
    assert "The records come from" not in render(records)
    records[0]["env"]["git_commit"] = "def5678"
    records[1]["schema_version"] = 2
    records[2]["env"]["framework_version"] = "2.6.0"
    text = render(records)
    assert "The records come from 2 commits: abc1234 (2), def5678 (1)." in text
    assert "The records come from 2 record schemas: v1 (2), v2 (1)." in text
    assert "The torch records come from 2 versions: torch 2.5.1 (2), torch 2.6.0 (1)." in text
    assert text.index("The records come from") < text.index("### " + TITLE)


def seed_records() -> list[dict]:
    """torch-single and torch-ddp x2 at seeds 0, 1, 2 (a spec each), resnet, CPU devices."""
    records = []
    for seed, (single, ddp) in enumerate([(0.80, 0.70), (0.82, 0.71), (0.84, 0.72)]):
        spec = f"{seed + 1}" * 64
        records += [on_cpu(record("torch-single", "torch", 1, 0, 100.0, spec=spec,
                                  accuracy=single), threads=2),
                    on_cpu(record("torch-ddp", "torch", 2, 0, 180.0, spec=spec, accuracy=ddp,
                                  launcher="torchrun"), threads=1)]
        for rec in records[-2:]:
            rec.update(seed=seed, model="resnet")
    return records


def test_a_change_beyond_seed_noise_is_said_in_the_headline_and_has_its_section() -> None:
    """3 seeds each (a spec each): torch-single scores 0.80-0.84, torch-ddp x2 0.70-0.72, so
    its change -0.11 (median 0.71 against 0.82) exceeds the baseline's spread 0.04; a resnet
    without sync BN names its BatchNorm cause."""
    records = seed_records()
    text = render(records)
    assert ("Did N devices change the result: 1 of 1 N-device configuration(s) with 3 or more "
            "seeds changed a quality metric beyond the 1-device baseline's seed-to-seed spread "
            "(torch-ddp x2: accuracy -0.11)") in text
    rows = markdown_tables(text)[("Did N devices change the result",
                                  "Quality at N devices against 1 device")]
    accuracy = next(row for row in rows if row["metric"] == "accuracy")
    assert (accuracy["median"], accuracy["baseline median"], accuracy["change"],
            accuracy["baseline spread (max-min)"], accuracy["verdict"]) == (
        "0.71", "0.82", "-0.11", "0.04", "beyond seed noise")
    assert "batchnorm" in accuracy["causes"]
    # one seed only: nothing can be judged, so neither the line nor the section
    assert "Did N devices change" not in render(records[:2])
