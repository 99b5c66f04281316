"""The published sizes from the spec alone (--preset gpt2-small, vit-b16, resnet50): their
parameter counts and FLOPs against the figures their authors and torchvision publish, the
presets' refusals, and the random inputs they read. Each framework's own count and step are
in tests/test_published_steps.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import parbench
from parbench.base.errors import UsageError
from parbench.contract.data import RANDOM_IMAGES, load_random_images
from parbench.contract.flops import model_flops, resnet_convs
from parbench.contract.language import RANDOM_WINDOWS, load_language
from parbench.contract.spec import (
    build_spec,
    parameter_count,
    parameters,
    resnet_blocks,
    spec_dict,
    spec_from_dict,
)
from parbench.contract.tasks import ImageClassification
from parbench.launch.config import resolve
from parbench.launch.options import RunConfig

IMAGENET = ((3, 224, 224), 1000)


def preset_spec(preset: str):
    """The spec a run of ``preset`` trains, as the harness builds it."""
    cfg = RunConfig.of(preset=preset)
    sizes = {k: getattr(cfg, k) for k in ("width", "depth", "heads", "patch")
             if getattr(cfg, k) is not None}
    if cfg.model == "gpt":
        return build_spec("gpt", (cfg.context,), cfg.vocab, sizes)
    return build_spec(cfg.model, *IMAGENET, sizes)


@pytest.mark.parametrize("preset,count", [
    ("gpt2-small", 124_439_808),  # Radford et al. 2019's 117M, as counted by Hugging Face
    ("vit-b16", 86_567_656),  # torchvision vit_b_16
    ("resnet50", 25_557_032),  # torchvision resnet50
])
def test_a_presets_spec_has_the_published_parameter_count(preset, count):
    assert parameter_count(preset_spec(preset)) == count


def test_resnet50_is_v1_5_with_torchvisions_forward_cost():
    """torchvision lists 4.09 GFLOPS for resnet50 and 17.56 for vit_b_16 (multiply-adds: ours
    are 2 FLOPs each). v1.5: the stride in the 3x3 (conv2), not the first 1x1."""
    spec = preset_spec("resnet50")
    assert model_flops(spec).forward_per_sample == 2 * 4_089_184_256
    assert [block.name for block in resnet_blocks(spec)][-1] == "blocks.15"
    strided = [block for block in resnet_blocks(spec) if block.stride == 2]
    assert [block.name for block in strided] == ["blocks.3", "blocks.7", "blocks.13"]
    stem, first = resnet_convs(spec)[:2]
    assert (stem.kernel, stem.stride, stem.output_size) == (7, 2, (112, 112))
    assert first.size == (56, 56)  # after the max-pool
    assert parameters(spec)["blocks.3.conv2.conv.weight"].shape == (128, 128, 3, 3)
    assert round(model_flops(preset_spec("vit-b16")).forward_per_sample / 2e9, 2) == 17.56


def test_gpt2_small_costs_six_n_per_token_plus_attention():
    """PaLM's and nanoGPT's count: 6 x the non-embedding parameters plus the output projection
    per token (the tied table is a product there), plus 12 x layers x width x context for
    attention, training per token."""
    spec = preset_spec("gpt2-small")
    non_embedding = parameter_count(spec) - 50257 * 768 - 1024 * 768
    per_token = 6 * (non_embedding + 50257 * 768) + 12 * 12 * 768 * 1024
    norms_and_biases = 6 * (12 * (4 * 768 + 3 * 768 + 768 + 3072 + 768) + 2 * 768)
    assert model_flops(spec).training_per_sample / 1024 == per_token - norms_and_biases


@pytest.mark.parametrize("values,message", [
    (dict(preset="gpt2-small", width=512), "--preset gpt2-small is the published size: its "
     "--width is 768, not 512; leave --width out or give 768"),
    (dict(preset="resnet50", dataset="digits"), "--preset resnet50 is the published size: its "
     "--dataset is random-images, not digits; leave --dataset out or give random-images"),
    (dict(preset="vit-b16", patch=8), "--preset vit-b16 is the published size: its --patch is "
     "16, not 8; leave --patch out or give 16"),
    (dict(preset="gpt2-small", context=128), "--preset gpt2-small is the published size: its "
     "--context is 1024, not 128"),
    (dict(preset="resnet50", model="gpt"), "--preset resnet50: language-modeling has no such "
     "preset; its presets: medium, gpt2-small"),
])
def test_a_published_preset_refuses_other_sizes_or_another_task(values, message):
    with pytest.raises(UsageError) as refused:
        RunConfig.of(**values)
    assert str(refused.value).startswith(message)


def test_a_published_preset_keeps_a_given_optimizer_and_equal_sizes():
    cfg = RunConfig.of(preset="gpt2-small", width=768, optimizer="sgd")
    assert (cfg.model, cfg.width, cfg.vocab, cfg.optimizer) == ("gpt", 768, 50257, "sgd")
    assert RunConfig.of(preset="resnet50").model == "resnet50"


def test_a_refused_preset_on_the_command_line_is_one_line_exit_2(tmp_path):
    out = tmp_path / "runs"
    done = parbench("run", "torch-single", "--preset", "vit-b16", "--depth", "6", "--out",
                    str(out))
    assert done.returncode == 2 and not out.exists()
    assert done.stderr.strip() == ("parbench: error: --preset vit-b16 is the published size: "
                                   "its --depth is 12, not 6; leave --depth out or give 12")


def test_patch_is_the_vits_alone():
    with pytest.raises(UsageError, match="--patch is an option of --model vit, not of --model "
                                         "gpt"):
        resolve(RunConfig.of(model="gpt", patch=4))
    assert build_spec("vit", (3, 32, 32), 10, {"patch": 8}).tokens == 17
    # a depth alone keeps the MLP's width: only a width given sets it to 4 x
    assert build_spec("vit", (3, 32, 32), 10, {"depth": 3}).mlp_width == 128


def test_random_inputs_hold_nothing_to_learn():
    images = load_random_images()
    assert images.input_shape == RANDOM_IMAGES["shape"] and images.holds["classes"] == 1000
    assert abs(float(np.mean(images.x_train))) < 1e-2
    assert images.fingerprint() == load_random_images().fingerprint()  # drawn from a seed
    tokens = load_language("random-tokens", None, 1024, 50257)
    assert tokens.x_train.shape == (RANDOM_WINDOWS["train"], 1024)
    assert tokens.holds["loss_floor"] == pytest.approx(np.log(50257))
    assert np.array_equal(tokens.x_train[:, 1:], tokens.y_train[:, :-1])


def test_a_record_keeps_no_confusion_matrix_above_100_classes():
    """1000 classes would be a million counts, 7 MB of JSON per record; the macro scores stay."""
    rng = np.random.default_rng(0)
    for classes, kept in ((100, True), (1000, False)):
        task = ImageClassification(classes)
        labels, guesses = rng.integers(0, classes, 64), rng.integers(0, classes, 64)
        scores = task.eval_scores(task.eval_counts(labels, guesses, 1.0))
        assert (scores["confusion_matrix"] is not None) == kept
        assert 0 <= scores["precision_macro"] <= 1 and scores["count"] == 64


def test_the_older_models_keep_their_spec_and_its_hash():
    """The backbone's new fields stay out of a spec's dict at their defaults, so every model
    that existed before ResNet-50 hashes as it did (records' names, --resume's matches); one
    that sets them round-trips through a job file's JSON."""
    before = {"input_shape": (3, 8, 8), "num_classes": 10, "stem_channels": 8,
              "stage_channels": (8, 16, 32), "stage_strides": (1, 2, 2),
              "norm": {"momentum": 0.1, "eps": 1e-05}, "kind": "resnet"}
    assert spec_dict(build_spec("resnet", (3, 8, 8), 10)) == before
    assert "stage_blocks" not in spec_dict(build_spec("centernet", (3, 64, 64), 1))
    resnet50 = preset_spec("resnet50")
    assert spec_dict(resnet50)["stage_blocks"] == (3, 4, 6, 3)
    assert spec_from_dict(json.loads(json.dumps(spec_dict(resnet50)))) == resnet50
