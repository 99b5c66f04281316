"""The mode table's derived rules, in this process: the record schema's ``modes`` entry and its
version rules, and why a backend refuses a mode (the exact line a user reads). Real runs and
the parser are tested in test_modes.py, test_cli.py and test_mode_table_torch.py."""

from __future__ import annotations

import jsonschema
import pytest

from parbench.results.records import SCHEMA_VERSION
from parbench.run.modes import FIRST_SCHEMA, MODES, Modes, modes_schema, refusal
from parbench.run.registry import BACKENDS

DEFAULTS = {name: mode.default for name, mode in MODES.items()}
LATER = {name for name, mode in MODES.items() if mode.since > FIRST_SCHEMA}


def valid(modes: dict, version: int = SCHEMA_VERSION) -> bool:
    entry, rules = modes_schema(SCHEMA_VERSION)
    schema = {"type": "object", "properties": {"schema_version": {}, "modes": entry},
              "allOf": rules}
    return jsonschema.Draft202012Validator(schema).is_valid(
        {"schema_version": version, "modes": modes})


def test_every_default_and_every_choice_is_a_valid_record_value() -> None:
    assert valid(DEFAULTS)
    for name, mode in MODES.items():
        for value in mode.choices:
            assert valid({**DEFAULTS, name: value}), (name, value)
    assert valid({**DEFAULTS, "compile": True, "sync_bn": True, "grad_accum": 8,
                  "loader_workers": 3})


@pytest.mark.parametrize("name,value", [
    ("precision", "fp64"), ("precision", 32), ("input", "disk"), ("compile", "yes"),
    ("compile", 1), ("sync_bn", None), ("grad_accum", 0), ("grad_accum", 2.5),
    ("grad_accum", "2"), ("loader_workers", -1), ("loader_workers", True)])
def test_a_value_outside_its_mode_makes_the_record_invalid(name, value) -> None:
    assert not valid({**DEFAULTS, name: value})


def test_unknown_modes_and_missing_first_schema_modes_are_invalid() -> None:
    assert not valid({**DEFAULTS, "pipeline_parallel": 2})
    for name in set(MODES) - LATER:
        assert not valid({k: v for k, v in DEFAULTS.items() if k != name}), name


def test_later_modes_are_required_from_the_schema_that_first_carried_them() -> None:
    assert {name: MODES[name].since for name in LATER} == {
        "input": 4, "loader_workers": 4, "reshard_after_forward": 8}
    without = {k: v for k, v in DEFAULTS.items() if k not in LATER}
    assert valid(without, version=FIRST_SCHEMA)
    for name in LATER:  # each of them, not only one
        lacking = {k: v for k, v in DEFAULTS.items() if k != name}
        assert valid(lacking, version=MODES[name].since - 1), name
        for version in range(MODES[name].since, SCHEMA_VERSION + 1):
            assert not valid(lacking, version=version), (name, version)
    assert valid(DEFAULTS, version=FIRST_SCHEMA)  # an older record may carry them too


def test_each_mode_entry_is_its_kinds() -> None:
    assert MODES["precision"].schema() == {"enum": ["fp32", "bf16", "fp16"]}
    assert MODES["compile"].schema() == {"type": "boolean"}
    assert MODES["grad_accum"].schema() == {"type": "integer", "minimum": 1}
    assert MODES["loader_workers"].schema() == {"type": "integer", "minimum": 0}


def test_sync_bn_on_one_device_is_refused_with_the_reason() -> None:
    assert refusal(BACKENDS["torch-ddp"], Modes(sync_bn=True), gpus=1, devices=1) == (
        "--sync-bn needs several devices: one device has no other BatchNorm statistics to "
        "synchronize")


def test_resharding_is_refused_where_the_backend_cannot_choose_when_it_frees() -> None:
    no = Modes(reshard_after_forward="no")
    assert refusal(BACKENDS["torch-ddp"], no, gpus=2, devices=2) == (
        "--reshard-after-forward no is not available for torch-ddp: only a sharded backend "
        "that lets you choose when parameters are freed has it (torch-fsdp, paddle-sharding)")
    assert refusal(BACKENDS["jax-fsdp"], no, gpus=2, devices=2) is not None
    assert refusal(BACKENDS["torch-fsdp"], no, gpus=0, devices=2) is None


def test_a_backends_own_refusal_names_the_flag_as_given_and_the_reason() -> None:
    why = BACKENDS["tf-mirrored-keras"].refusals["grad_accum"]
    assert refusal(BACKENDS["tf-mirrored-keras"], Modes(grad_accum=4), gpus=0, devices=2) == (
        f"--grad-accum 4 is not available for tf-mirrored-keras: {why}")
    assert refusal(BACKENDS["tf-mirrored"], Modes(grad_accum=4), gpus=0, devices=2) is None


def test_a_frameworks_refusal_holds_with_gpus_too() -> None:
    why = BACKENDS["jax-single"].info.refusals["precision=fp16"]
    for gpus in (0, 1):
        assert refusal(BACKENDS["jax-single"], Modes(precision="fp16"), gpus, 1) == (
            f"--precision fp16 is not available for jax-single: {why}")
        # the refusal names one value: the others of the mode run
        assert refusal(BACKENDS["jax-single"], Modes(precision="bf16"), gpus, 1) is None


def test_a_gpu_only_mode_is_refused_only_without_gpus() -> None:
    why = BACKENDS["torch-ddp"].info.gpu_only["sync_bn"]
    assert refusal(BACKENDS["torch-ddp"], Modes(sync_bn=True), gpus=0, devices=2) == (
        f"--sync-bn is not available for torch-ddp: {why}")
    assert refusal(BACKENDS["torch-ddp"], Modes(sync_bn=True), gpus=2, devices=2) is None


def test_a_gpu_only_pair_is_refused_only_together_and_only_without_gpus() -> None:
    tf = BACKENDS["tf-mirrored"]
    why = tf.info.gpu_only_pairs[("sync_bn", "compile")]
    both = Modes(sync_bn=True, compile=True)
    assert refusal(tf, both, gpus=0, devices=2) == (
        f"--sync-bn with --compile is not available for tf-mirrored without GPUs: {why}")
    assert refusal(tf, both, gpus=2, devices=2) is None
    assert refusal(tf, Modes(sync_bn=True), gpus=0, devices=2) is None
    assert refusal(tf, Modes(compile=True), gpus=0, devices=2) is None


def test_the_first_refused_mode_in_name_order_is_the_one_named() -> None:
    jax = BACKENDS["jax-pmap"]
    line = refusal(jax, Modes(precision="bf16", compile=True, input="native"), 0, 2)
    assert line.startswith("--compile is not available for jax-pmap: ")
