"""The framework-free side of the transformer family: the spec's roles and registry, the vit
tensors and their initialisers, the AdamW and clipping rules, and the run options. Each
framework's ViT, AdamW and clipping are tested in test_vit_<framework>.py."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from conftest import parbench
from parbench.base.errors import UsageError
from parbench.contract.optim import AdamWReference, OptimizerSpec, clip_coefficient
from parbench.contract.spec import (
    KINDS,
    ROLE_RULES,
    Role,
    build_spec,
    kind_of,
    parameter_count,
    parameters,
    spec_dict,
    spec_from_dict,
)
from parbench.contract.weights import initial_weights
from parbench.launch.config import RunConfig, resolve


def test_every_role_has_a_rule_and_decay_spares_norms_and_biases():
    assert set(ROLE_RULES) == set(Role)
    decaying = {role for role, rule in ROLE_RULES.items() if rule.decay}
    assert decaying == {Role.CONV_WEIGHT, Role.DENSE_WEIGHT, Role.POSITION_EMBEDDING,
                        Role.CLASS_TOKEN, Role.TOKEN_EMBEDDING}
    assert {r for r, rule in ROLE_RULES.items() if not rule.trainable} == {Role.NORM_MEAN,
                                                                            Role.NORM_VAR}


def test_vit_tensors_follow_the_canonical_layout():
    spec = build_spec("vit", (3, 32, 32), 10)
    params = parameters(spec)
    width, tokens = spec.width, (32 // spec.patch) ** 2 + 1
    assert params["patch.weight"].shape == (width, 3, spec.patch, spec.patch)
    assert params["position_embedding"].shape == (1, tokens, width)
    assert params["class_token"].shape == (1, 1, width)
    assert params["blocks.0.attn.qkv.weight"].shape == (3 * width, width)  # [out, in]: q|k|v
    assert params["blocks.1.mlp.fc1.weight"].shape == (spec.mlp_width, width)
    assert params["head.weight"].shape == (10, width)
    per_block = (2 * 2 * width + 3 * width * width + 3 * width + width * width + width
                 + 2 * width * spec.mlp_width + spec.mlp_width + width)
    expected = (width * 3 * spec.patch ** 2 + width + width + tokens * width
                + spec.depth * per_block + 2 * width + 10 * width + 10)
    assert parameter_count(spec) == expected
    assert not params["blocks.0.norm1.weight"].decays and params["blocks.0.attn.qkv.weight"].decays
    assert not params["blocks.0.attn.qkv.bias"].decays and params["position_embedding"].decays


def test_vit_fits_every_dataset_shape_and_refuses_one_its_patch_does_not_divide():
    for shape in ((3, 32, 32), (1, 28, 28), (1, 8, 8)):
        spec = build_spec("vit", shape, 10)
        assert spec_from_dict(spec_dict(spec)) == spec
        assert spec.tokens == (shape[1] // 4) * (shape[2] // 4) + 1
    with pytest.raises(ValueError, match="patch 4 does not divide the 30x30 images"):
        build_spec("vit", (3, 30, 30), 10)


def test_embeddings_draw_from_normal_002_and_the_old_models_keep_their_weights():
    weights = initial_weights(build_spec("vit", (3, 32, 32), 10), seed=0)
    position = weights["position_embedding"]
    assert abs(float(position.std()) - 0.02) < 0.002 and abs(float(position.mean())) < 0.002
    assert np.all(weights["norm.weight"] == 1) and np.all(weights["blocks.0.norm1.bias"] == 0)
    # the resnet's tensors were drawn by the same rules before roles existed (a fixed probe)
    resnet = initial_weights(build_spec("resnet", (3, 32, 32), 10), seed=0)
    assert float(np.abs(resnet["stem.conv.weight"]).sum()) == pytest.approx(43.150352, abs=1e-5)


def test_an_unknown_model_kind_is_an_error_not_another_model():
    spec = spec_dict(build_spec("mlp", (1, 8, 8), 10))
    with pytest.raises(ValueError, match="unknown model kind 'transformer'"):
        spec_from_dict({**spec, "kind": "transformer"})
    with pytest.raises(ValueError, match="unknown model kind"):
        kind_of("transformer")
    assert set(KINDS) == {"resnet", "mlp", "vit", "gpt", "centernet"}


def test_adamw_reference_is_the_rule_written_out():
    # one decaying and one exempt scalar, the same gradient twice: lr 0.1, wd 0.1
    spec = OptimizerSpec(lr=0.1, weight_decay=0.1, name="adamw")
    params = {"w": np.ones(1, np.float32), "b": np.ones(1, np.float32)}
    grads = {"w": np.full(1, 0.5, np.float32), "b": np.full(1, 0.5, np.float32)}
    adamw = AdamWReference(spec, {"w": True, "b": False})
    adamw.step(params, grads, lr=0.1)
    # decay 1 -> 0.99; m-hat 0.5, v-hat 0.25: the step is lr * 0.5 / (0.5 + eps) = 0.1
    assert params["w"][0] == pytest.approx(0.89, abs=1e-6)
    assert params["b"][0] == pytest.approx(0.9, abs=1e-6)
    adamw.step(params, grads, lr=0.1)
    assert params["w"][0] == pytest.approx(0.89 * 0.99 - 0.1, abs=1e-6)
    assert params["b"][0] == pytest.approx(0.8, abs=1e-6)


def test_clipping_scales_only_a_norm_above_the_limit():
    assert clip_coefficient(0.5, 1.0) == 1.0
    assert clip_coefficient(4.0, 1.0) == pytest.approx(0.25, rel=1e-6)


def test_sgd_runs_keep_their_hash_fields_and_adamw_records_its_own():
    sgd = resolve(RunConfig(), 4096).optimizer
    assert sgd.as_dict() == {"lr": 0.1, "momentum": 0.9, "weight_decay": 5e-4,
                             "schedule": "cosine", "warmup_steps": 0}
    adamw = resolve(RunConfig(optimizer="adamw", clip_grad_norm=1.0), 4096).optimizer
    assert adamw.as_dict() == {"lr": 1e-3, "weight_decay": 0.05, "schedule": "cosine",
                               "warmup_steps": 0, "name": "adamw", "beta1": 0.9,
                               "beta2": 0.999, "eps": 1e-8, "clip_grad_norm": 1.0}
    assert replace(sgd, clip_grad_norm=2.0).as_dict()["clip_grad_norm"] == 2.0


@pytest.mark.parametrize("settings,message", [
    (dict(optimizer="adamw", momentum=0.5), "--momentum is an option of --optimizer sgd, not "
     "of adamw"),
    (dict(beta1=0.8), "--beta1 is an option of --optimizer adamw, not of sgd"),
    (dict(optimizer="adamw", beta2=1.0), "--beta2 must be in [0, 1), got 1.0"),
    (dict(optimizer="adamw", eps=0.0), "--eps must be positive, got 0.0"),
    (dict(clip_grad_norm=-1.0), "--clip-grad-norm must be positive, got -1.0"),
])
def test_optimizer_options_that_cannot_apply_are_refused(settings, message):
    with pytest.raises(UsageError) as refused:
        resolve(RunConfig(**settings), 4096)
    assert str(refused.value) == message


@pytest.mark.parametrize("args,message", [
    (("--model", "transformer"), "--model 'transformer' is not one of resnet, resnet-nonorm, "
     "resnet50, mlp, vit"),
    (("--optimizer", "lion"), "argument --optimizer: invalid choice: 'lion'"),
    (("--model", "vit", "--dataset", "digits", "--optimizer", "adamw", "--momentum", "0.9"),
     "--momentum is an option of --optimizer sgd, not of adamw"),
])
def test_unknown_model_or_optimizer_is_one_line_and_no_record(tmp_path, args, message):
    out = tmp_path / "runs"
    done = parbench("run", "torch-single", *args, "--steps", "2", "--out", str(out), timeout=60)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr.strip().splitlines()[-1], done.stderr
    assert not out.exists() or not list(out.iterdir())


def test_weight_comparisons_leave_out_only_the_attention_key_bias():
    from parbench.cli.parity import identifiable

    bias = np.arange(12.0)  # width 4: q rows 0-3, k rows 4-7, v rows 8-11
    assert identifiable("blocks.0.attn.qkv.bias", bias).tolist() == [0, 1, 2, 3, 8, 9, 10, 11]
    assert identifiable("blocks.0.attn.qkv.weight", bias) is bias
    assert identifiable("head.bias", bias) is bias
