"""A run's metrics from its ranks' logs (parbench.results.metrics) and the image task's
evaluation counts, on hand-made logs whose every figure is computed here by hand: the slowest
rank defines each step, warm-up steps stay out of the steady timing, the loss curve weights
each rank by its rows, counts from several ranks add up to the scores of all rows. Real runs
check the same figures end to end (tests/test_records.py, tests/test_evaluation.py); these
run in the pytest process, so the mutation run (tests/mutation.py) sees them."""

from __future__ import annotations

import numpy as np
import pytest

from parbench.contract.tasks import ImageClassification, LanguageModeling
from parbench.results.intervals import bootstrap_step_interval, step_interval
from parbench.results.metrics import aggregate, divergence, warmup_steps
from parbench.run.loop import RankLog

TASK = ImageClassification(classes=3)
MS = 1e-3


def two_node_logs() -> list[RankLog]:
    """Rank 0 (node 0, 3 rows a step) and rank 1 (node 1, 1 row): 12 steps, the first slow;
    over the 11 steady steps rank 0 takes 10..20 ms and rank 1 20..10 ms, so the slowest of
    each step is 20 19 18 17 16 15 16 17 18 19 20 ms (sorted: 15 16 16 17 17 18 18 ...)."""
    evals = [{"step": 2, "accuracy": 0.1, "loss": 2.0, "train_s": 0.5, "eval_s": 0.35,
              "precision_macro": 0.1, "recall_macro": 0.1, "f1_macro": 0.1,
              "confusion_matrix": [[0]], "score_s": 0.1},
             {"step": 5, "accuracy": 0.4, "loss": 1.5, "train_s": 1.0, "eval_s": 0.3,
              "precision_macro": 0.3, "recall_macro": 0.35, "f1_macro": 0.32,
              "confusion_matrix": [[1]], "score_s": 0.2},
             {"step": 11, "accuracy": 0.6, "loss": 1.2, "train_s": 2.0, "eval_s": 0.25,
              "precision_macro": 0.5, "recall_macro": 0.55, "f1_macro": 0.52,
              "confusion_matrix": [[2]], "score_s": 0.4}]
    # on the clock of time to target, rank 1 ends each evaluation later, but the second
    rank0_evals = [dict(e, wall_s=wall) for e, wall in zip(evals, (0.6, 1.4, 2.5))]
    rank1_evals = [dict(e, wall_s=wall) for e, wall in zip(evals, (0.7, 1.3, 2.6))]
    return [
        RankLog(rank=0, rows=3, first_step_start=100.5, node=0, host="a",
                step_s=[2.0] + [(10 + i) * MS for i in range(11)], losses=[1.0] * 12,
                peak_rss_mb=100.0, observed={"compute_dtype": "float32", "compiled_graphs": 1,
                                             "sync_bn_layers": 4, "micro_batches": 2,
                                             "clipped_steps": 3},
                input={"wait_s": [0.001, 0.003]}, evals=rank0_evals, peak_device_mb=None),
        RankLog(rank=1, rows=1, first_step_start=101.0, node=1, host="b",
                step_s=[3.0] + [(20 - i) * MS for i in range(11)], losses=[5.0] * 12,
                peak_rss_mb=200.0, observed={"compiled_graphs": 2},
                evals=[*rank1_evals[:2], dict(rank1_evals[2], score_s=0.9, accuracy=0.1)]),
    ]


def test_warmup_leaves_out_a_tenth_of_the_steps_at_least_one_at_most_five() -> None:
    assert [warmup_steps(n) for n in (0, 1, 2, 19, 20, 29, 50, 51, 1000)] == [
        0, 0, 1, 1, 2, 2, 5, 5, 5]


def test_the_slowest_rank_defines_each_step_and_warmup_stays_out() -> None:
    metrics = aggregate(two_node_logs(), TASK, global_batch=4, launch_time=100.0,
                        target=None)
    assert metrics["steady_steps"] == 11
    assert metrics["step_time_ms"] == pytest.approx({"median": 18.0, "p10": 16.0, "p90": 20.0})
    assert metrics["throughput"] == pytest.approx(4 / 0.018)
    assert metrics["first_step_s"] == 3.0
    assert metrics["train_s"] == pytest.approx(3.0 + (15 + 2 * (16 + 17 + 18 + 19 + 20)) * MS)
    assert metrics["startup_s"] == pytest.approx(1.0)  # the last rank to start its first step


def test_cpu_per_step_is_each_ranks_mean_over_its_steady_steps() -> None:
    """12 steps, warm-up 1: the first step's CPU (compiling) stays out, as its time does."""
    logs = two_node_logs()
    logs[0].cpu_s = [(5.0, 1.0)] + [(0.010 * (1 + i % 2), 0.002) for i in range(11)]
    logs[1].cpu_s = [(9.0, 0.0)] + [(0.030, 0.0)] * 11
    cpu = aggregate(logs, TASK, 4, 100.0, None)["cpu_ms_per_step"]
    assert cpu["user"] == pytest.approx([10 * (6 * 1 + 5 * 2) / 11, 30.0])
    assert cpu["system"] == pytest.approx([2.0, 0.0])


def test_the_steady_step_times_leave_out_the_compile_step() -> None:
    """What the one-repeat interval bootstraps is each steady step's time, the slowest rank's,
    in order: never the first step, which holds the tracing or compile time (3 s here, against
    steady steps of 15-20 ms); the interval of the row is the bootstrap of exactly these."""
    metrics = aggregate(two_node_logs(), TASK, 4, 100.0, None)
    steady = [20.0, 19.0, 18.0, 17.0, 16.0, 15.0, 16.0, 17.0, 18.0, 19.0, 20.0]
    assert metrics["steady_step_ms"] == pytest.approx(steady)
    assert len(metrics["steady_step_ms"]) == metrics["steady_steps"]
    interval = step_interval([metrics])
    assert interval == bootstrap_step_interval([metrics["steady_step_ms"]])
    assert interval.method == "bootstrap, 11 steps of 1 run(s)" and interval.high <= 20.0


def test_a_language_task_counts_tokens_per_step_over_the_median_step() -> None:
    """Tokens/s is tokens per step (global batch x context) over the median steady step, not
    rows: 4 rows of 16 tokens a step, 18 ms the median step (as above)."""
    logs = two_node_logs()
    for log in logs:
        log.evals = [dict(e, perplexity=float(np.exp(e["loss"])), tokens=64) for e in log.evals]
    task = LanguageModeling(8, context=16, loss_floor=1.0)
    metrics = aggregate(logs, task, global_batch=4, launch_time=100.0, target=None)
    assert metrics["items_per_step"] == 4 * 16
    assert metrics["throughput"] == pytest.approx(4 * 16 / 0.018, rel=1e-12)
    assert (metrics["loss_floor"], metrics["floor_gap"]) == (1.0, pytest.approx(0.2))


def test_the_loss_curve_weights_each_rank_by_its_rows() -> None:
    metrics = aggregate(two_node_logs(), TASK, 4, 100.0, None)
    assert metrics["loss_curve"] == pytest.approx([(3 * 1.0 + 1 * 5.0) / 4] * 12)


def test_evaluation_modes_and_memory_come_from_the_right_ranks() -> None:
    metrics = aggregate(two_node_logs(), TASK, 4, 100.0, target=None)
    assert (metrics["final_accuracy"], metrics["final_loss"], metrics["eval_s"]) == (
        0.6, 1.2, 0.25)
    assert metrics["accuracy_curve"][0]["step"] == 2  # rank 0's evaluations, every one
    assert metrics["accuracy_curve"][1:] == [
        {"step": 5, "accuracy": 0.4, "loss": 1.5, "train_s": 1.0, "eval_s": 0.3, "wall_s": 1.4,
         "precision_macro": 0.3, "recall_macro": 0.35, "f1_macro": 0.32},
        {"step": 11, "accuracy": 0.6, "loss": 1.2, "train_s": 2.0, "eval_s": 0.25,
         "wall_s": 2.5, "precision_macro": 0.5, "recall_macro": 0.55, "f1_macro": 0.52}]
    assert (metrics["precision_macro"], metrics["confusion_matrix"]) == (0.5, [[2]])
    assert (metrics["compute_dtype"], metrics["sync_bn_layers"], metrics["micro_batches"],
            metrics["clipped_steps"]) == ("float32", 4, 2, 3)
    assert metrics["compiled_graphs"] == 2  # the most any rank compiled
    assert metrics["peak_rss_mb"] == [100.0, 200.0] and metrics["peak_device_mb"] is None
    assert metrics["target"] is None and metrics["time_to_target_s"] is None


def test_defaults_when_no_rank_observed_its_modes() -> None:
    logs = two_node_logs()
    for log in logs:
        log.observed = None
    logs[1].peak_device_mb = [7.0, 8.0]
    metrics = aggregate(logs, TASK, 4, 100.0, None)
    assert (metrics["compute_dtype"], metrics["compiled_graphs"], metrics["sync_bn_layers"],
            metrics["micro_batches"], metrics["clipped_steps"]) == (None, None, 0, 1, None)
    assert metrics["peak_device_mb"] == [7.0, 8.0]
    logs[0].observed = {"compiled_graphs": 3}  # a rank that could not tell: no figure
    logs[1].observed = {"compiled_graphs": None}
    assert aggregate(logs, TASK, 4, 100.0, None)["compiled_graphs"] is None


def test_a_node_whose_rank_did_not_time_its_scoring_has_no_score_time() -> None:
    logs = two_node_logs()
    del logs[1].evals[-1]["score_s"]
    assert [node["score_s"] for node in aggregate(logs, TASK, 4, 100.0, None)["nodes"]] == [
        0.4, None]


def test_time_to_target_is_the_first_evaluation_that_reached_it() -> None:
    """Accuracy is reached from above, loss from below; the time is that evaluation's end on
    the clock of time to target, on the last rank to get there; steps and samples with it."""
    def to_target(metric: str, value: float) -> dict:
        target = (TASK.target_of(metric), value)
        metrics = aggregate(two_node_logs(), TASK, 4, 100.0, target)
        assert metrics["time_to_target_s"] == metrics["target"]["time_s"]
        return metrics["target"]

    assert [to_target("accuracy", v)["time_s"] for v in (0.05, 0.3, 0.4, 0.5, 0.6)] == [
        0.7, 1.4, 1.4, 2.6, 2.6]
    assert [to_target("loss", v)["time_s"] for v in (2.5, 2.0, 1.6, 1.5, 1.3, 1.2)] == [
        0.7, 0.7, 1.4, 1.4, 2.6, 2.6]
    assert to_target("accuracy", 0.4) == {
        "metric": "accuracy", "value": 0.4, "better": "higher", "evaluations": 3,
        "reached": True, "time_s": 1.4, "steps": 5, "items": 20}
    assert to_target("loss", 1.1) == {
        "metric": "loss", "value": 1.1, "better": "lower", "evaluations": 3,
        "reached": False, "time_s": None, "steps": None, "items": None}


def test_a_language_target_counts_tokens_and_reads_the_figure_it_names() -> None:
    logs = two_node_logs()
    for log in logs:
        log.evals = [dict(e, perplexity=float(np.exp(e["loss"])), tokens=64) for e in log.evals]
    task = LanguageModeling(8, context=16, loss_floor=1.0)
    perplexity = aggregate(logs, task, 4, 100.0, (task.target_of("perplexity"), 4.5))
    assert perplexity["target"]["steps"] == 5 and perplexity["target"]["items"] == 5 * 4 * 16
    assert task.target_of(None).metric == "loss"  # the task's first target


def test_each_node_has_its_steady_steps_slowest_scoring_and_mean_wait() -> None:
    node0, node1 = aggregate(two_node_logs(), TASK, 4, 100.0, None)["nodes"]
    assert (node0["node"], node0["host"], node0["ranks"]) == (0, "a", [0])
    assert node0["step_time_ms"] == pytest.approx({"median": 15.0, "p10": 11.0, "p90": 19.0})
    assert node0["score_s"] == 0.4 and node0["data_wait_ms"] == pytest.approx(2.0)
    assert (node1["node"], node1["host"], node1["ranks"]) == (1, "b", [1])
    assert node1["step_time_ms"]["median"] == pytest.approx(15.0)
    assert node1["score_s"] == 0.9 and node1["data_wait_ms"] is None


def test_divergence_names_the_step_and_the_first_rank_whose_loss_was_not_finite() -> None:
    logs = two_node_logs()
    assert divergence(logs) is None
    for log in logs:
        log.diverged_step = 11
    logs[1].losses[-1] = float("inf")
    assert divergence(logs) == {"step": 11, "rank": 1, "loss": "inf"}
    logs[0].losses[-1] = float("nan")
    assert divergence(logs) == {"step": 11, "rank": 0, "loss": "nan"}


def test_counts_of_ranks_add_up_to_the_scores_of_all_rows() -> None:
    labels = np.array([0, 0, 1, 1, 2, 2])
    predicted = np.array([0, 1, 1, 1, 2, 0])
    parts = [TASK.eval_counts(labels[:4], predicted[:4], 2.5),
             TASK.eval_counts(labels[4:], predicted[4:], 3.5)]
    assert TASK.count_size == 3 * 3 + 1 == len(parts[0])
    scores = TASK.eval_scores(parts[0] + parts[1])
    assert scores["confusion_matrix"] == [[1, 1, 0], [0, 2, 0], [1, 0, 1]]
    assert (scores["count"], scores["accuracy"], scores["loss"]) == (6, pytest.approx(4 / 6), 1.0)
    # per class precision 1/2, 2/3, 1; recall 1/2, 1, 1/2
    assert scores["precision_macro"] == pytest.approx((1 / 2 + 2 / 3 + 1) / 3)
    assert scores["recall_macro"] == pytest.approx((1 / 2 + 1 + 1 / 2) / 3)
    f1 = [2 * p * r / (p + r) for p, r in ((1 / 2, 1 / 2), (2 / 3, 1), (1, 1 / 2))]
    assert scores["f1_macro"] == pytest.approx(sum(f1) / 3)


def test_a_class_never_present_or_never_predicted_scores_0_not_nan() -> None:
    # class 2 is predicted once but never present; class 1 is present once, never predicted
    counts = TASK.eval_counts(np.array([0, 0, 1]), np.array([0, 2, 0]), 0.0)
    scores = TASK.eval_scores(counts)
    # class 0: 1 of its 2 rows found, 1 of the 2 rows predicted 0 right
    assert scores["precision_macro"] == pytest.approx((1 / 2 + 0 + 0) / 3)
    assert scores["recall_macro"] == pytest.approx((1 / 2 + 0 + 0) / 3)
    assert scores["f1_macro"] == pytest.approx((1 / 2 + 0 + 0) / 3)
    # a class present exactly once and always found: recall 1
    one = TASK.eval_scores(TASK.eval_counts(np.array([0, 1, 2]), np.array([0, 1, 2]), 0.0))
    assert one["recall_macro"] == one["precision_macro"] == one["f1_macro"] == 1.0


def test_the_image_task_is_made_from_what_its_dataset_holds() -> None:
    data = ImageClassification.load("synthetic", None, {})
    assert data.name == "synthetic" and data.holds == {"classes": 10}
    task = ImageClassification.from_data(data)
    assert task.classes == 10 and task.spec_for("mlp", (3, 16, 16)).num_classes == 10


def test_the_image_task_builds_its_specs_and_probe_batches() -> None:
    spec = TASK.spec_for("mlp", (3, 16, 16))
    assert spec.num_classes == 3 and tuple(spec.input_shape) == (3, 16, 16)
    probe = TASK.probe_batch(5, np.random.default_rng(0))
    assert probe.shape == (5, 3, 16, 16) and probe.dtype == np.float32
    assert abs(float(probe.mean())) < 0.2 and 0.8 < float(probe.std()) < 1.2
