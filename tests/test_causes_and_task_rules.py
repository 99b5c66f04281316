"""Every branch of every cause detector (parbench.results.causes), pinned whole: whether it
applies, its cell, its reason as the report prints it and the options that switch it off, on
records made by hand; and the record schema's per-task rules (parbench.contract.tasks
.record_rules) validated directly, since the schema builds them once at import."""

from __future__ import annotations

import jsonschema
import pytest

from parbench.contract.tasks import record_rules
from parbench.results.causes import EXACT_PARTS, Cause, checked_causes


def record(**changes) -> dict:
    base = {"model": "resnet", "backend": "torch-ddp", "world_size": 2, "global_batch": 64,
            "per_device_batch": 32, "batch_mode": "global", "lr_scaling": "none", "lr": 0.1,
            "env": {}, "modes": {}, "metrics": None}
    return {**base, **changes}


def causes(**changes) -> dict[str, Cause]:
    return {cause.name: cause for cause in checked_causes(record(**changes))}


def test_batchnorm_per_replica_and_its_three_absences():
    assert causes()["batchnorm"] == Cause(
        "batchnorm", "BatchNorm per replica", True,
        "each of 2 replicas normalises its 32 rows with their own statistics", {"sync_bn": True})
    assert causes(model="mlp")["batchnorm"] == Cause(
        "batchnorm", "BatchNorm per replica", False, "--model mlp has no BatchNorm")
    assert causes(modes={"sync_bn": True})["batchnorm"].reason == \
        "--sync-bn: statistics over the global batch"
    assert causes(env={"dataparallel_no_op": True})["batchnorm"].reason == \
        "nn.DataParallel without CUDA ran one replica"
    assert Cause("x", "x", True, "", {"sync_bn": True, "lr": None}).option == "--sync-bn"


def test_a_grown_global_batch_and_its_switch():
    grown = causes(batch_mode="per-device")["global-batch"]
    assert grown == Cause("global-batch", "global batch x2", True,
                          "--per-device-batch 32: global batch 64 against 32 on 1 device",
                          {"global_batch": 32, "per_device_batch": None})
    assert grown.option == "--global-batch 32"
    assert causes()["global-batch"] == Cause("global-batch", "global batch grew", False,
                                             "--global-batch 64 is the same on 1 device")


def test_a_linearly_scaled_lr_and_its_switch():
    scaled = causes(batch_mode="per-device", lr_scaling="linear", lr=0.2)["lr-scaling"]
    assert scaled == Cause("lr-scaling", "lr x2", True,
                           "--lr-scaling linear: lr 0.2 against 0.1 on 1 device",
                           {"lr_scaling": "none", "lr": 0.1})
    assert scaled.option == "--lr-scaling none --lr 0.1"
    assert causes()["lr-scaling"] == Cause("lr-scaling", "lr scaled", False, "--lr-scaling none")
    assert causes(lr_scaling="linear")["lr-scaling"].reason == \
        "the global batch is fixed, so the lr scales the same on 1 device"


def fed(duplicated: int, dropped: int | None, train_size: int = 100) -> dict:
    epochs = [{"duplicated": duplicated, "dropped": dropped}, {"duplicated": 0, "dropped": 36}]
    return {"input": {"train_size": train_size, "epochs": epochs}}


def test_a_native_loader_counts_beyond_the_contracts_tail():
    native = {"input": "native", "loader_workers": 2}
    # train_size 100 with global batch 64: the contract leaves 36 out per epoch too
    found = causes(modes=native, metrics=fed(3, 40))["native-loader"]
    assert found == Cause("native-loader", "loader: 3 dup., 4 dropped", True,
                          "3 sample(s) trained on twice and 4 left out beyond the contract's "
                          "tail of 36 per epoch, over 2 epoch(s)",
                          {"input": "arrays", "loader_workers": 0})
    assert causes(modes={"input": "native"}, metrics=fed(1, None))["native-loader"] \
        .switch_off == {"input": "arrays"}  # an epoch cut short counts no drops
    assert causes(modes=native, metrics=fed(0, 36))["native-loader"] == Cause(
        "native-loader", "native loader", False, "every sample once per epoch, as the contract")
    assert causes(modes=native, metrics={"input": {}})["native-loader"].reason == \
        "the record has no per-epoch sample counts"
    assert causes()["native-loader"].reason == "--input arrays: the contract's shards, checked"


def test_eval_sharding_where_processes_keep_their_own_statistics():
    assert causes()["eval-sharding"] == Cause(
        "eval-sharding", "eval with each rank's statistics", True,
        "each of 2 processes scores its part of the test set with BatchNorm running "
        "statistics of its own; --sync-bn makes them equal, together with the batchnorm cause")
    assert causes(model="mlp")["eval-sharding"].reason == \
        f"every rank holds the same model and {EXACT_PARTS}"
    assert causes(backend="tf-mirrored")["eval-sharding"].reason == \
        "one process drives every replica and scores with one set of running statistics"
    assert checked_causes(record(world_size=1)) == []


def language(version: int, **metrics) -> dict:
    return {"schema_version": version, "task": "language-modeling", "metrics": metrics}


FULL_LANGUAGE = dict(perplexity=2.0, tokens=10, loss_floor=None, floor_gap=None,
                     items_per_step=64)
MACRO = dict(precision_macro=0.5, recall_macro=0.5, f1_macro=0.5, confusion_matrix=[[1]])


@pytest.mark.parametrize("record,missing", [
    (language(10, **FULL_LANGUAGE), None),
    ({**language(10), "metrics": {k: v for k, v in FULL_LANGUAGE.items() if k != "tokens"}},
     "tokens"),
    (language(7), "perplexity"),
    ({**language(7), "metrics": None}, None),  # a failed run has no metrics to hold them
    ({"schema_version": 3, "metrics": {}}, "precision_macro"),  # no task: image classification
    ({"schema_version": 2, "metrics": {}}, None),  # before the macro scores existed
    ({"schema_version": 10, "task": "image-classification", "metrics": MACRO}, None),
    ({"schema_version": 10, "task": "image-classification", "metrics": {}}, "precision_macro"),
])
def test_each_tasks_rule_requires_its_fields_from_its_schema_on(record, missing):
    problems = [error.message for error in
                jsonschema.Draft202012Validator({"allOf": record_rules()}).iter_errors(record)]
    if missing is None:
        assert problems == []
    else:
        assert any(f"'{missing}' is a required property" == p for p in problems), problems


def test_one_rule_per_task_keyed_by_the_records_task_and_version():
    rules = record_rules()
    assert [rule["if"]["properties"]["task"]["const"] for rule in rules] == [
        "image-classification", "language-modeling", "object-detection"]
    assert [rule["if"]["properties"]["schema_version"]["minimum"] for rule in rules] == [3, 7, 13]
    assert [rule["if"].get("required") for rule in rules] == [None, ["task"], ["task"]]
