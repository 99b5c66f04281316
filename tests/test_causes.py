"""Why N devices changed a result, from records alone: each known cause named exactly where
the record shows it (parbench.results.causes), and the change against the 1-device baseline
judged by the baseline's seed spread (parbench.results.accuracy_change), on hand-made records
with hand-computed figures and on the reference runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from parbench.contract.detection_task import FIGURE_KEYS
from parbench.results.accuracy_change import (
    CHANGE_COLUMNS,
    baseline_key,
    change_grid,
    change_rows,
    summarise,
    verdict,
)
from parbench.results.causes import checked_causes, known_causes

REFERENCE = Path(__file__).parents[1] / "results" / "reference"
MODES = {"precision": "fp32", "compile": False, "sync_bn": False, "grad_accum": 1,
         "input": "arrays", "loader_workers": 0}


def record(backend: str = "torch-ddp", devices: int = 2, seed: int = 0, accuracy: float = 0.5,
           **changes) -> dict:
    """A minimal ok record of a resnet run at a fixed global batch of 64, 40 steps."""
    modes = {**MODES, **changes.pop("modes", {})}
    made = {"backend": backend, "framework": backend.split("-")[0].replace("tf", "tensorflow"),
            "launcher": "torchrun" if devices > 1 else "python", "world_size": devices,
            "nnodes": 1, "seed": seed, "repeat": 0, "status": "ok", "model": "resnet",
            "dataset": "synthetic", "global_batch": 64, "per_device_batch": 64 // devices,
            "batch_mode": "global", "lr": 0.1, "lr_scaling": "none",
            "optimizer": {"name": "sgd", "lr": 0.1, "momentum": 0.9},
            "config": {"steps": 40, "epochs": None}, "modes": modes, "variant": {}, "env": {},
            "metrics": {"final_accuracy": accuracy, "precision_macro": accuracy / 2,
                        "recall_macro": accuracy / 4, "f1_macro": accuracy / 8,
                        "input": {"train_size": 4100, "epochs": [
                            {"epoch": 0, "duplicated": 0, "dropped": 4100 % 64}]}}}
    return {**made, **changes}


def names(found) -> list[str]:
    return [cause.name for cause in found]


def test_a_plain_resnet_run_at_two_processes_shows_batchnorm_and_eval_sharding():
    found = checked_causes(record())
    assert names(found) == ["batchnorm", "global-batch", "lr-scaling", "native-loader",
                            "eval-sharding"]
    assert names(known_causes(record())) == ["batchnorm", "eval-sharding"]
    batchnorm, evaluation = known_causes(record())
    assert batchnorm.option == "--sync-bn" and "32 rows" in batchnorm.reason
    assert evaluation.option is None  # no option switches it off alone


def test_one_device_has_no_cause():
    assert checked_causes(record(devices=1)) == [] and known_causes(record(devices=1)) == []


@pytest.mark.parametrize("changes,reason", [
    ({"model": "mlp"}, "has no BatchNorm"),
    ({"modes": {"sync_bn": True}}, "--sync-bn"),
    ({"env": {"dataparallel_no_op": True}, "backend": "torch-dp"}, "ran one replica"),
])
def test_batchnorm_is_absent_where_the_record_rules_it_out(changes, reason):
    (cause,) = [c for c in checked_causes(record(**changes)) if c.name == "batchnorm"]
    assert not cause.applies and reason in cause.reason


def test_eval_sharding_applies_only_where_processes_keep_statistics_of_their_own():
    def evaluation(**changes):
        (cause,) = [c for c in checked_causes(record(**changes)) if c.name == "eval-sharding"]
        return cause

    assert evaluation().applies and evaluation(backend="paddle-spawn").applies
    assert evaluation(backend="tf-multiworker").applies
    # exact parts, equal models: absent, with the reason
    assert not evaluation(model="mlp").applies
    assert "every row once" in evaluation(model="mlp").reason
    assert not evaluation(modes={"sync_bn": True}).applies
    assert "one process" in evaluation(backend="tf-mirrored").reason
    assert "device 0's running statistics" in evaluation(backend="jax-multiprocess").reason


def test_a_per_device_batch_grows_the_global_batch_and_scales_the_lr_only_when_linear():
    grown = record(batch_mode="per-device", global_batch=64, per_device_batch=32, lr=0.05)
    assert names(known_causes(grown)) == ["batchnorm", "global-batch", "eval-sharding"]
    (batch,) = [c for c in known_causes(grown) if c.name == "global-batch"]
    assert batch.switch_off == {"global_batch": 32, "per_device_batch": None}
    assert batch.option == "--global-batch 32"
    scaled = {**grown, "lr_scaling": "linear"}  # 0.1 x 64/128 at 2 devices, 0.025 at 1
    (lr,) = [c for c in known_causes(scaled) if c.name == "lr-scaling"]
    assert lr.switch_off == {"lr_scaling": "none", "lr": pytest.approx(0.025)}
    fixed = record(lr_scaling="linear")  # a fixed global batch: the same lr on 1 device
    assert "lr-scaling" not in names(known_causes(fixed))


def native(epochs: list[dict], workers: int = 0) -> dict:
    fed = {"train_size": 4100, "epochs": epochs}
    base = record(modes={"input": "native", "loader_workers": workers})
    return {**base, "metrics": {**base["metrics"], "input": fed}}


def test_a_native_loader_is_a_cause_only_beyond_the_contracts_tail():
    tail = 4100 % 64  # the contract leaves these out each epoch too
    assert "native-loader" not in names(known_causes(native([
        {"duplicated": 0, "dropped": tail}, {"duplicated": 0, "dropped": None}])))
    padded = known_causes(native([{"duplicated": 3, "dropped": tail}], workers=2))
    (cause,) = [c for c in padded if c.name == "native-loader"]
    assert cause.cell == "loader: 3 dup., 0 dropped"
    assert cause.switch_off == {"input": "arrays", "loader_workers": 0}
    cut = known_causes(native([{"duplicated": 0, "dropped": tail + 5}]))
    assert [c.cell for c in cut if c.name == "native-loader"] == ["loader: 0 dup., 5 dropped"]
    arrays = record(metrics={"input": {"train_size": 4100, "epochs": [
        {"duplicated": 9, "dropped": 0}]}})  # counts of a contract feed are never blamed
    assert "native-loader" not in names(known_causes(arrays))


def test_the_reference_runs_name_the_causes_their_backends_have():
    found = {}
    for path in sorted((REFERENCE / "runs").glob("*-n2-*.json")):
        run = json.loads(path.read_text())
        found[run["backend"]] = names(known_causes(run))
    assert found["torch-ddp"] == ["batchnorm", "eval-sharding"]
    assert found["jax-pmap"] == ["batchnorm"]  # one process: one set of statistics
    for path in (REFERENCE / "gpt-runs").glob("*-n2-*.json"):  # no BatchNorm, fixed batch
        assert known_causes(json.loads(path.read_text())) == []


# --- the change against the 1-device baseline


def test_summary_takes_each_seeds_median_then_the_median_and_spread_over_seeds():
    runs = [record(seed=0, accuracy=0.50), record(seed=0, accuracy=0.70),  # seed 0: 0.60
            record(seed=1, accuracy=0.40), record(seed=2, accuracy=0.65),
            {**record(seed=3), "status": "failed", "metrics": None}]
    summary = summarise(runs, "final_accuracy")
    assert (summary.seeds, summary.median, summary.spread) == (3, pytest.approx(0.60),
                                                               pytest.approx(0.25))
    assert summarise(runs[:3], "final_accuracy").spread is None  # 2 seeds: no spread


def test_verdict_against_the_baselines_spread():
    base = summarise([record(seed=s, accuracy=a) for s, a in enumerate((0.5, 0.52, 0.51))],
                     "final_accuracy")
    assert verdict(0.019, base, 3) == "within seed noise"
    assert verdict(-0.021, base, 3) == "beyond seed noise"
    assert verdict(0.5, base, 2) == "n/a (2 seeds; 3 needed)"
    assert verdict(None, base, 3) == "n/a (no figure on one side)"


def seeds(backend: str, devices: int, accuracies: tuple[float, ...], **changes) -> list[dict]:
    return [record(backend, devices, seed, accuracy, **changes)
            for seed, accuracy in enumerate(accuracies)]


def test_change_rows_judge_each_n_device_configuration_against_the_single_backend():
    runs = [*seeds("torch-single", 1, (0.80, 0.82, 0.81)), *seeds("torch-ddp", 1, (0.1,) * 3),
            *seeds("torch-ddp", 2, (0.70, 0.75, 0.72))]
    rows = change_rows(runs)
    assert [row["metric"] for row in rows] == ["accuracy", "Precision macro", "Recall macro",
                                               "F1 macro"]
    assert all(list(row) == list(CHANGE_COLUMNS) for row in rows)
    accuracy, precision = rows[0], rows[1]
    assert accuracy["baseline"] == "torch-single x1"  # not torch-ddp x1
    assert accuracy["median"] == pytest.approx(0.72)
    assert accuracy["baseline median"] == pytest.approx(0.81)
    assert accuracy["change"] == pytest.approx(-0.09)
    assert accuracy["baseline spread (max-min)"] == pytest.approx(0.02)
    assert accuracy["verdict"] == "beyond seed noise"
    assert accuracy["causes"] == "batchnorm, eval-sharding"
    assert (accuracy["seeds"], accuracy["runs ok"], accuracy["devices"]) == (3, "3/3", 2)
    assert precision["change"] == pytest.approx(-0.045)  # accuracy / 2 in these records
    assert precision["verdict"] == "beyond seed noise"  # spread 0.01


@pytest.mark.parametrize("config,steps,budget", [
    ({"steps": 40, "epochs": None}, 40, "40 steps"),
    ({"steps": None, "epochs": 3}, 96, "3 epochs"),
    # no budget of the user's: the record's steps are those run (a target stops a run early),
    # not a budget, so none is made up
    ({}, 36, "default"),
], ids=["steps", "epochs", "default"])
def test_the_budget_is_said_as_the_user_set_it(config, steps, budget):
    runs = [*seeds("torch-single", 1, (0.8,) * 3, config=config, steps=steps),
            *seeds("torch-ddp", 2, (0.7,) * 3, config=config, steps=steps)]
    assert {row["budget"] for row in change_rows(runs)} == {budget}


def test_change_rows_with_too_few_seeds_or_no_baseline_say_so():
    two = change_rows([*seeds("torch-single", 1, (0.8, 0.9)), *seeds("torch-ddp", 2, (0.1,) * 3)])
    assert two[0]["verdict"] == "n/a (2 seeds; 3 needed)"
    assert two[0]["baseline spread (max-min)"] is None
    other_steps = seeds("torch-single", 1, (0.8,) * 3, config={"steps": 80, "epochs": None})
    alone = change_rows([*other_steps, *seeds("torch-ddp", 2, (0.1,) * 3)])
    assert alone[0]["baseline"] is None and alone[0]["verdict"] == "n/a (no 1-device baseline)"


def test_a_per_device_configuration_finds_the_1_device_run_of_its_per_device_batch():
    base = seeds("torch-single", 1, (0.8, 0.8, 0.8), global_batch=32, per_device_batch=32)
    grown = seeds("torch-ddp", 2, (0.6, 0.6, 0.6), batch_mode="per-device", global_batch=64,
                  per_device_batch=32)
    (row, *_) = change_rows([*base, *grown])
    assert row["baseline"] == "torch-single x1" and row["batch"] == "per-device 32 (global 64)"
    assert row["change"] == pytest.approx(-0.2) and row["verdict"] == "beyond seed noise"
    assert row["causes"] == "batchnorm, global-batch, eval-sharding"


# each thing a run fixes besides seed, backend, devices and modes, changed alone
KEY_CHANGES = [
    {"model": "mlp"}, {"dataset": "synthetic-hard"}, {"global_batch": 128},
    {"optimizer": {"name": "sgd", "lr": 0.1, "momentum": 0.0}},
    {"optimizer": {"name": "adamw", "lr": 0.1}}, {"lr": 0.05},
    *({"config": {"steps": 40, "epochs": None, key: value}} for key, value in (
        ("width", 32), ("depth", 3), ("heads", 2), ("data_dir", "/data"), ("context", 32),
        ("vocab", 16), ("train_subset", 1000), ("target", 0.9), ("target_metric", "loss"),
        ("eval_every", 4))),
    {"config": {"steps": 80, "epochs": None}}, {"config": {"steps": None, "epochs": 2}}]


def changed_name(changes: dict) -> str:
    """The field a KEY_CHANGES entry changes, as the test's id."""
    fields = changes.get("config", changes).keys() - {"steps", "epochs"}
    return next(iter(fields or changes["config"]))


@pytest.mark.parametrize("changes", KEY_CHANGES, ids=changed_name)
def test_a_change_to_what_a_run_fixes_is_another_baseline(changes):
    one = record("torch-single", 1)
    assert baseline_key({**one, **changes}) != baseline_key(one)


def test_what_one_device_runs_alike_keys_alike():
    one = record("torch-single", 1)
    # the seed, the backend and the lr the optimizer carries are not the configuration
    assert baseline_key({**one, "seed": 3, "backend": "tf-single"}) == baseline_key(one)
    assert baseline_key({**one, "optimizer": {"name": "sgd", "lr": 9.0, "momentum": 0.9}}) \
        == baseline_key(one)
    # on one device a per-device batch of 64 is the global batch of 64
    per_device = {**one, "batch_mode": "per-device", "global_batch": 999, "per_device_batch": 64}
    assert baseline_key(per_device) == baseline_key(one)
    # 2 devices at a per-device 32 with linear scaling: the lr one device of 32 would have
    scaled = record("torch-ddp", 2, batch_mode="per-device", global_batch=64,
                    per_device_batch=32, lr=0.2, lr_scaling="linear")
    assert baseline_key(scaled) == baseline_key(record("torch-single", 1, global_batch=32,
                                                       per_device_batch=32, lr=0.1))
    assert baseline_key({**scaled, "lr_scaling": "none"}) != baseline_key(scaled)


def test_a_language_model_is_judged_by_its_validation_loss():
    def gpt(backend, devices, losses):
        return [{**run, "model": "gpt", "dataset": "markov", "task": "language-modeling",
                 "metrics": {"final_loss": loss}}
                for run, loss in zip(seeds(backend, devices, (0,) * 3), losses)]

    (row,) = change_rows([*gpt("jax-single", 1, (2.0, 2.1, 2.2)),
                          *gpt("jax-pmap", 2, (2.1, 2.1, 2.1))])
    assert row["metric"] == "val loss" and row["change"] == pytest.approx(0.0)
    assert row["verdict"] == "within seed noise" and row["causes"] == "none"


def detector(backend: str, devices: int, seed: int, f1: float) -> dict:
    """A record of the detector whose every figure is ``f1``, but small recall 2 x ``f1``."""
    metrics = {key: 2 * f1 if key == "recall_small" else f1 for key in FIGURE_KEYS}
    return record(backend, devices, seed, model="centernet", dataset="faces",
                  task="object-detection", metrics={**metrics, "final_loss": 1.0})


def test_the_grid_places_each_detection_figure_by_split_and_size():
    runs = [*(detector("torch-single", 1, s, f1) for s, f1 in enumerate((0.90, 0.92, 0.91))),
            *(detector("torch-ddp", 2, s, f1) for s, f1 in enumerate((0.85, 0.86, 0.90)))]
    headers, lines = change_grid(change_rows(runs))
    assert headers[-4:] == ("figure", "all", "small", "large")
    assert [line["figure"] for line in lines] == ["F1", "P", "R", "F1 shifted", "P shifted",
                                                  "R shifted"]
    f1, recall = lines[0], lines[2]
    assert (f1["backend"], f1["devices"], f1["baseline"]) == ("torch-ddp", 2, "torch-single x1")
    # median 0.86 against 0.91: -0.05, beyond the spread of 0.02
    assert f1["all"] == f1["small"] == f1["large"] == "-0.050 (0.020) *"
    # small recall: 1.72 against 1.82, spread 0.04
    assert (recall["small"], recall["all"]) == ("-0.100 (0.040) *", "-0.050 (0.020) *")


def test_the_grid_is_empty_for_a_task_without_one_and_says_an_unjudged_change():
    assert change_grid(change_rows([*seeds("torch-single", 1, (0.8, 0.82, 0.81)),
                                    *seeds("torch-ddp", 2, (0.7,) * 3)])) == ((), [])
    runs = [*(detector("torch-single", 1, s, 0.9) for s in range(2)),
            *(detector("torch-ddp", 2, s, 0.91) for s in range(3))]
    (first, *_) = change_grid(change_rows(runs))[1]
    assert first["all"] == "+0.010 (n/a)"  # 2 baseline seeds: no spread, no verdict


def test_runs_with_and_without_lr_scaling_are_two_configurations_of_one_baseline():
    """explain's 'as given' (lr scaled to 0.05 for 2 x 32 rows) and 'lr-scaling off' (the
    1-device lr 0.025) share their baseline, not their row."""
    grown = {"batch_mode": "per-device", "global_batch": 64, "per_device_batch": 32}
    runs = [*seeds("torch-single", 1, (0.80, 0.82, 0.81), **{**grown, "global_batch": 32},
                   lr=0.025),
            *seeds("torch-ddp", 2, (0.70,) * 3, **grown, lr_scaling="linear", lr=0.05),
            *seeds("torch-ddp", 2, (0.60,) * 3, **grown, lr=0.025)]
    accuracy = [row for row in change_rows(runs) if row["metric"] == "accuracy"]
    assert [(row["lr"], row["median"], row["baseline"]) for row in accuracy] == [
        ("0.025", pytest.approx(0.6), "torch-single x1"),
        ("0.05 (linear scaling)", pytest.approx(0.7), "torch-single x1")]
