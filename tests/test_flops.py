"""Model FLOPs from the spec (parbench.contract.flops): hand-computed counts of a small spec of
every kind, two independent formulas (6N per token, nanoGPT's attention term), and each
framework's own counter on the same models, agreeing exactly where the counter counts the same
operations and, where it does not, off by what the test computes or states.

The counters run in subprocesses, one per framework for all five models (conftest: TensorFlow
and Paddle segfault when imported into one process with another framework):
``python -m parbench.frameworks.<framework>.flops SPEC_JSON ...``. All counts are per sample,
and "training" is the forward plus the backward of every parameter from a random output
gradient, as frameworks/*/flops.py say.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
from test_published_sizes import preset_spec

from conftest import needs, shared_result
from parbench.contract.flops import (
    COUNTER_ROWS,
    Conv,
    ModelFlops,
    centernet_head_convs,
    counter_input,
    model_flops,
    patch_conv,
    resnet_convs,
    step_flops,
)
from parbench.contract.spec import (
    MODEL_NAMES,
    CenterNetSpec,
    GPTSpec,
    MLPSpec,
    ResNetSpec,
    Role,
    ViTSpec,
    build_spec,
    parameters,
    spec_dict,
)
from parbench.contract.tasks import PUBLISHED, ImageClassification, LanguageModeling

MAC = 2  # FLOPs per multiply-add


# --- hand-computed counts: the arithmetic written out, one small spec per kind
def test_resnet_by_hand():
    """Stem 1 -> 2 channels on 4x4, then one block to 4 channels at stride 2 (so a 1x1
    projection shortcut). A 3x3 conv with padding 1 keeps 4x4; at stride 2 it gives 2x2."""
    spec = ResNetSpec((1, 4, 4), num_classes=2, stem_channels=2, stage_channels=(4,),
                      stage_strides=(2,))
    stem = 4 * 4 * 2 * 1 * 9  # positions x c_out x c_in x taps = 288
    shortcut = 2 * 2 * 4 * 2 * 1  # 1x1, stride 2: 32
    conv1 = 2 * 2 * 4 * 2 * 9  # 3x3, stride 2: 288
    conv2 = 2 * 2 * 4 * 4 * 9  # 3x3 on the 2x2 map: 576
    head = 4 * 2  # on the pooled features: 8
    flops = model_flops(spec)
    assert flops == ModelFlops(conv=MAC * (stem + shortcut + conv1 + conv2), dense=MAC * head,
                               attention=0, first_layer=MAC * stem)
    assert flops.forward_per_sample == 2 * 1192
    assert flops.training_per_sample == 3 * 2 * 1192
    assert flops.training_computed_per_sample == 3 * 2 * 1192 - 2 * 288
    assert [c.output_size for c in resnet_convs(spec)] == [(4, 4), (2, 2), (2, 2), (2, 2)]


def test_centernet_by_hand():
    """Stem 3 -> 2 channels on 8x8, one block to 4 channels at stride 2 (a 1x1 projection),
    then three heads of 3 hidden channels on the 4x4 map: heat (1 map), size and offset (2
    each)."""
    spec = CenterNetSpec((3, 8, 8), num_classes=1, stem_channels=2, stage_channels=(4,),
                         stage_strides=(2,), head_channels=3)
    stem = 8 * 8 * 2 * 3 * 9  # 3456
    shortcut, conv1, conv2 = 4 * 4 * 4 * 2, 4 * 4 * 4 * 2 * 9, 4 * 4 * 4 * 4 * 9
    hidden = 3 * (4 * 4 * 3 * 4 * 9)  # each head's 3x3 from the 4 backbone channels
    out = 4 * 4 * 3 * (1 + 2 + 2)  # the 1x1 to each head's maps
    assert model_flops(spec) == ModelFlops(
        conv=MAC * (stem + shortcut + conv1 + conv2 + hidden + out), dense=0, attention=0,
        first_layer=MAC * stem)
    assert model_flops(replace(spec, norm=None)) == model_flops(spec)


def test_one_convolution_counts_the_padding_taps():
    """A 3x3 conv, padding 1, on a 4x4 image: 16 outputs x 9 taps, the taps that read the
    zero border included (what the kernels compute; XLA's cost analysis leaves them out)."""
    assert Conv(c_in=1, c_out=1, kernel=3, stride=1, padding=1, size=(4, 4)).multiply_adds == 144
    assert Conv(3, 5, 3, 2, 1, (5, 7)).output_size == (3, 4)


def test_resnet_without_norm_counts_the_same():
    """Biases are left out, so conv + bias counts as conv + BatchNorm."""
    assert model_flops(build_spec("resnet-nonorm", (3, 16, 16), 10)) == \
        model_flops(build_spec("resnet", (3, 16, 16), 10))


def test_mlp_by_hand():
    flops = model_flops(MLPSpec((1, 2, 2), num_classes=3, hidden=(5,)))
    assert flops == ModelFlops(conv=0, dense=MAC * (4 * 5 + 5 * 3), attention=0,
                               first_layer=MAC * 4 * 5)
    # no hidden layer: the head reads the data
    assert model_flops(MLPSpec((1, 2, 2), 3, hidden=())).first_layer == MAC * 4 * 3


def test_vit_by_hand():
    """4x4 image, patch 2: 4 patches + the class token = 5 tokens; width 4, 2 heads of 2."""
    spec = ViTSpec((1, 4, 4), num_classes=3, patch=2, width=4, depth=1, heads=2, mlp_width=8)
    patch = 4 * 4 * 1 * 2 * 2  # patches x c_out x c_in x 2x2 kernel = 64
    block = 5 * (4 * 12 + 4 * 4 + 4 * 8 + 8 * 4)  # tokens x (qkv + proj + fc1 + fc2) = 640
    attention = 2 * (5 * 5 * 2 + 5 * 5 * 2)  # heads x (q k^T + weights v), d = 2: 200
    head = 4 * 3  # the class token's row only
    assert model_flops(spec) == ModelFlops(conv=MAC * patch, dense=MAC * (block + head),
                                           attention=MAC * attention, first_layer=MAC * patch)
    assert patch_conv(spec).multiply_adds == patch


def test_gpt_by_hand():
    """Context 3, width 4, 2 heads, vocabulary 7; the masked half of the scores counted."""
    spec = GPTSpec(vocab=7, context=3, width=4, depth=1, heads=2, mlp_width=8)
    block = 3 * (4 * 12 + 4 * 4 + 4 * 8 + 8 * 4)  # 384
    attention = 2 * (3 * 3 * 2 + 3 * 3 * 2)  # full 3x3 scores per head: 72
    output = 3 * 4 * 7  # tied projection at every position: 84
    flops = model_flops(spec)
    assert flops == ModelFlops(conv=0, dense=MAC * (block + output), attention=MAC * attention,
                               first_layer=0, items_per_sample=3)
    assert flops.forward_per_item == MAC * (384 + 72 + 84) / 3
    assert flops.training_computed_per_sample == flops.training_per_sample  # lookups only


def test_default_models():
    """The default models on the default datasets (synthetic 3x32x32 images, 10 classes; the
    markov language: context 64, vocabulary 64), pinned by hand: the resnet's convolutions
    are stem 32*32*8*3*9, block 0 2 * 32*32*8*8*9, block 1 16*16*16*(8 + 8*9 + 16*9), block 2
    8*8*32*(16 + 16*9 + 32*9), and its head 32*10."""
    convs = 32 * 32 * 8 * 3 * 9 + 2 * 32 * 32 * 8 * 8 * 9 + 16 * 16 * 16 * (8 + 72 + 144) \
        + 8 * 8 * 32 * (16 + 144 + 288)
    for model in ("resnet", "resnet-nonorm"):
        assert model_flops(build_spec(model, (3, 32, 32), 10)).forward_per_sample == \
            MAC * (convs + 320) == 6_472_320
    assert model_flops(build_spec("mlp", (3, 32, 32), 10)).forward_per_sample == \
        MAC * (3072 * 128 + 128 * 64 + 64 * 10) == 804_096
    # 65 tokens; blocks 2 * 65 * (64*192 + 64*64 + 2 * 64*128); attention 2 * 2 * 65*65*64
    assert model_flops(build_spec("vit", (3, 32, 32), 10)).forward_per_sample == \
        MAC * (64 * 64 * 3 * 16 + 2 * 65 * 32768 + 2 * 2 * 65 * 65 * 64 + 640) == 11_077_376
    gpt = model_flops(build_spec("gpt", (64,), 64))
    assert gpt.forward_per_sample == \
        MAC * (2 * 64 * 49152 + 2 * 2 * 64 * 64 * 64 + 64 * 64 * 64) == 15_204_352


def test_six_n_plus_attention():
    """Independent of the layer walk: training FLOPs per token = 6 x the matrices' weights
    (from the parameter table; the token embedding counted once, as the tied projection) +
    12 x layers x width x T, nanoGPT's estimate_mfu and PaLM's (appendix B) formula. The
    MLP's per sample is 6 x its weights."""
    spec = build_spec("gpt", (128,), 96, {"width": 64, "depth": 3, "heads": 4})
    matrices = sum(int(np.prod(p.shape)) for p in parameters(spec).values()
                   if p.role in (Role.DENSE_WEIGHT, Role.TOKEN_EMBEDDING))
    flops = model_flops(spec)
    assert flops.training_per_sample / spec.context == 6 * matrices + 12 * 3 * 64 * 128
    mlp = build_spec("mlp", (3, 8, 8), 10)
    weights = sum(int(np.prod(p.shape)) for p in parameters(mlp).values()
                  if p.role is Role.DENSE_WEIGHT)
    assert model_flops(mlp).training_per_sample == 6 * weights


def test_step_flops_and_the_items_throughput_counts():
    spec = build_spec("vit", (3, 32, 32), 10)
    assert step_flops(spec, 256) == 256 * 3 * 11_077_376
    gpt = build_spec("gpt", (64,), 64)
    assert model_flops(gpt).items_per_sample == LanguageModeling(64, 64).items(1) == 64
    assert model_flops(spec).items_per_sample == ImageClassification(10).items(1) == 1


def test_unknown_kind_is_an_error():
    with pytest.raises(ValueError, match="unknown model kind 'cnn'"):
        model_flops(MLPSpec((1, 2, 2), 3, kind="cnn"))


def test_counter_input_is_the_tasks_input():
    assert counter_input(build_spec("vit", (3, 16, 16), 10)).dtype == np.float32
    ids = counter_input(build_spec("gpt", (24,), 40))
    assert ids.shape == (COUNTER_ROWS, 24) and ids.dtype == np.int64 and ids.max() < 40


# --- the frameworks' own counters, on small specs of every model
SPECS = {model: build_spec(model, (24,), 40) if model == "gpt"
         else build_spec(model, (3, 16, 16), 10) for model in MODEL_NAMES}
OURS = {model: model_flops(spec) for model, spec in SPECS.items()}


@pytest.fixture(scope="session")
def counts(tmp_path_factory):
    """counts(framework) -> {model: its counter's figures}, one subprocess per framework per
    test session."""
    def run(framework: str) -> dict:
        done = subprocess.run(
            [sys.executable, "-m", f"parbench.frameworks.{framework}.flops",
             *(json.dumps(spec_dict(spec)) for spec in SPECS.values())],
            capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        return dict(zip(SPECS, json.loads(done.stdout.strip().splitlines()[-1])))

    return lambda framework: shared_result(tmp_path_factory, ("flops", framework),
                                           lambda: run(framework))


@pytest.mark.slow
@needs("torch")
def test_torch_counts_exactly_the_same(counts):
    """FlopCounterMode counts matrix products and convolutions, no bias: the forward is ours
    exactly. Training is the convention less the first layer's input gradient, exactly (the
    stem conv, the patch conv, the MLP's first layer: the MLP measures 0.69 x the convention,
    the ResNet 0.98, the ViT 0.99, the GPT 1). With the default CPU attention kernel the
    counter misses attention (no formula for it, see frameworks/torch/flops.py)."""
    for model, counted in counts("torch").items():
        ours = OURS[model]
        assert counted["forward"] == ours.forward_per_sample, model
        assert counted["training"] == ours.training_computed_per_sample, model
        assert counted["forward_fused"] == ours.forward_per_sample - ours.attention, model
    assert counts("torch")["mlp"]["training"] / OURS["mlp"].training_per_sample == \
        pytest.approx(0.694, abs=1e-3)


@pytest.mark.slow
@needs("torch")
def test_torch_counts_the_published_sizes_exactly_on_the_meta_device(counts):
    """On torch's meta device (shapes only) the counter counts what it counts on real tensors,
    for every small spec; there it counts the published sizes (GPT-2 small, ViT-B/16, ResNet-50
    at 8 rows), which real tensors would take minutes to run, exactly as ours."""
    published = [preset_spec(preset) for preset in PUBLISHED]
    done = subprocess.run(
        [sys.executable, "-m", "parbench.frameworks.torch.flops", "--meta",
         *(json.dumps(spec_dict(spec)) for spec in [*SPECS.values(), *published])],
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    meta = json.loads(done.stdout.strip().splitlines()[-1])
    for model, counted in zip(SPECS, meta):
        assert (counted["forward"], counted["training"]) == (
            counts("torch")[model]["forward"], counts("torch")[model]["training"]), model
    for spec, counted in zip(published, meta[len(SPECS):]):
        ours = model_flops(spec)
        assert counted["forward"] == ours.forward_per_sample, spec.kind
        assert counted["training"] == ours.training_computed_per_sample, spec.kind


def valid_multiply_adds(conv: Conv) -> int:
    """The conv's multiply-adds on real input, those on the zero padding left out (XLA's
    cost analysis): per dimension, the (output, tap) pairs that land inside the image."""
    def taps(size: int, out: int) -> int:
        return sum(0 <= o * conv.stride - conv.padding + t < size
                   for o in range(out) for t in range(conv.kernel))

    (height, width), (out_h, out_w) = conv.size, conv.output_size
    return taps(height, out_h) * taps(width, out_w) * conv.c_in * conv.c_out


def xla_products(model: str) -> tuple[int, int]:
    """(forward, training) products as XLA counts them: ours less the padding taps, three
    times in training (the forward, the weight and the input gradient have the same valid
    taps), less the first layer's input gradient."""
    ours = OURS[model]
    convs = model_convs(model) if SPECS[model].kind in ("resnet", "centernet") else []
    padding = [MAC * (conv.multiply_adds - valid_multiply_adds(conv)) for conv in convs]
    forward = ours.forward_per_sample - sum(padding)
    stem = padding[0] if padding else 0
    return forward, ours.training_computed_per_sample - 3 * sum(padding) + stem


# XLA's total over its products (xla_products), measured (jax 0.10.2, CPU): the rest is
# elementwise work, which XLA counts and the convention leaves out. 1 FLOP per element for an
# add, max or multiply; BatchNorm's statistics and normalisation (resnet), LayerNorm (about 5
# per element, measured), softmax (4, its exp counted apart as a transcendental) and the erf
# GELU, which XLA expands into a polynomial: 64 FLOPs per element (measured), 84% of the GPT's
# forward surplus (24 x 256 x 2 fc1 outputs x 64 = 786,432 of 932,544).
XLA_SURPLUS = {  # model: (forward, training)
    "resnet": (1.0690, 1.0981),  # BatchNorm, relu, residual adds
    "resnet-nonorm": (1.0203, 1.0257),  # conv biases, relu, residual adds
    # BatchNorm, relu, residual adds and the stem's max-pool, beside far more products per
    # activation (bottlenecks on 256 to 2048 channels) than the resnet's
    "resnet50": (1.0211, 1.0284),
    "mlp": (1.00184, 1.00257),  # biases and relus (the forward exactly, below)
    "vit": (1.1501, 1.1173),
    "gpt": (1.1816, 1.1077),
    "centernet": (1.0401, 1.0565),  # as the resnet's, at stride 4, and the heads' biases
    "centernet-nonorm": (1.0118, 1.0164),
}


@pytest.mark.slow
@needs("jax")
def test_xla_counts_our_products_and_the_elementwise_work(counts):
    """XLA counts a convolution's multiply-adds on real input only (a 3x3 conv with padding 1
    on 16x16: 46 x 46 taps, not 48 x 48, so the ResNet's products are 0.858 x ours), and every
    elementwise operation. The MLP's forward is exact: ours + the biases (128 + 64 + 10) + the
    relus (128 + 64)."""
    counted = counts("jax")
    assert counted["mlp"]["forward"] == OURS["mlp"].forward_per_sample + 202 + 192
    forward, _ = xla_products("resnet")
    assert forward / OURS["resnet"].forward_per_sample == pytest.approx(0.858, abs=1e-3)
    for model, (forward_surplus, training_surplus) in XLA_SURPLUS.items():
        forward, training = xla_products(model)
        assert counted[model]["forward"] / forward == \
            pytest.approx(forward_surplus, abs=2e-4), model
        assert counted[model]["training"] / training == \
            pytest.approx(training_surplus, abs=2e-4), model


TF_PRODUCTS = ("MatMul", "BatchMatMulV2", "Conv2D")
TF_CONV_GRADIENTS = ("Conv2DBackpropInput", "Conv2DBackpropFilter")


def tf_conv_gradient(conv: Conv) -> float:
    """TensorFlow's formula for Conv2DBackpropInput and Conv2DBackpropFilter alike
    (profiler/internal/flops_registry.py): 2 x the conv's input elements x kernel^2 x c_out /
    stride^2. Its input is the padded image here (ZeroPadding2D, then a valid conv), so for a
    3x3 conv with padding 1 on 16x16 it counts 18^2 / 16^2 = 1.27 x the forward; our count,
    the forward's multiply-adds, is what runs."""
    height, width = (size + 2 * conv.padding for size in conv.size)
    return MAC * height * width * conv.c_in * conv.kernel ** 2 * conv.c_out / conv.stride ** 2


def model_convs(model: str) -> list[Conv]:
    """The model's convolutions: the ResNet's, the detector's backbone and heads, the ViT's
    patch embedding."""
    spec = SPECS[model]
    if spec.kind == "centernet":
        return resnet_convs(spec) + centernet_head_convs(spec)
    return resnet_convs(spec) if spec.kind == "resnet" else \
        [patch_conv(spec)] if spec.kind == "vit" else []


def biased_convs(model: str) -> list[Conv]:
    """The convolutions with a bias: every one of a model without norm and the ViT's patch
    embedding; the detector's heads always."""
    if model in ("resnet-nonorm", "vit", "centernet-nonorm"):
        return model_convs(model)
    return centernet_head_convs(SPECS[model]) if model == "centernet" else []


def tf_tied_projection_surplus(model: str) -> int:
    """The GPT's tied projection x @ E^T is a BatchMatMulV2 ([rows, T, width] by the table);
    the table's gradient is g^T x, a BatchMatMulV2 with adj_x, whose contraction is T. TF's
    formula reads the contraction from ``transpose_a``, an attribute BatchMatMulV2 does not
    have (it has ``adj_x``), so it takes g's last dimension, the vocabulary, instead: it
    counts 2 x vocab x vocab x width per row where 2 x T x vocab x width runs."""
    spec = SPECS[model]
    if spec.kind != "gpt":
        return 0
    return MAC * (spec.vocab - spec.context) * spec.vocab * spec.width


# TensorFlow's total over its products (matrix products and the three conv ops), measured
# (TF 2.21): elementwise ops by their own formulas, 1 per element (BiasAdd, AddV2, Mul, the
# norms' Mean and SquaredDifference) or 5 (Softmax); relu (Relu) has none, so it is not counted
TF_SURPLUS = {  # model: (forward, training)
    "resnet": (1.0426, 1.0295),  # BatchNorm
    "resnet-nonorm": (1.0092, 1.0048),  # BiasAdd, residual adds
    "resnet50": (1.0076, 1.0026),  # BatchNorm, on far more products per activation
    "mlp": (1.0009, 1.0009),  # BiasAdd, and BiasAddGrad in training
    "vit": (1.0413, 1.0388),  # LayerNorm, softmax, BiasAdd
    "gpt": (1.0354, 1.0343),
    "centernet": (1.0224, 1.0131),  # BatchNorm, and the heads' BiasAdd
    "centernet-nonorm": (1.0048, 1.0023),
}


@pytest.mark.slow
@needs("tensorflow")
def test_tensorflow_counts_our_products(counts):
    """The profiler's matrix products and convolutions are ours exactly in the forward. In
    training: the dense products and attention 3 x ours, less the MLP's first layer (TF's
    MatMul gradient skips the input the tape does not watch); its graph is read before
    Grappler prunes it, so the stem's and patch's input gradient, which never runs, is counted;
    the conv gradients by TF's own formula (tf_conv_gradient) and the tied projection's
    miscount (tf_tied_projection_surplus), both computed here."""
    for model, counted in counts("tensorflow").items():
        ours, convs = OURS[model], model_convs(model)
        forward_ops, training_ops = counted["forward_ops"], counted["training_ops"]
        products = sum(forward_ops.get(op, 0) for op in TF_PRODUCTS)
        assert products == ours.forward_per_sample, model
        matmuls = sum(training_ops.get(op, 0) for op in TF_PRODUCTS[:2])
        first_dense = ours.first_layer if model == "mlp" else 0
        assert matmuls == 3 * (ours.dense + ours.attention) - first_dense \
            + tf_tied_projection_surplus(model), model
        conv_ops = sum(training_ops.get(op, 0) for op in ("Conv2D", *TF_CONV_GRADIENTS))
        assert conv_ops == pytest.approx(
            ours.conv + 2 * sum(tf_conv_gradient(conv) for conv in convs), rel=1e-12), model
        training_products = matmuls + conv_ops
        forward_surplus, training_surplus = TF_SURPLUS[model]
        assert counted["forward"] / products == pytest.approx(forward_surplus, abs=2e-4), model
        assert counted["training"] / training_products == \
            pytest.approx(training_surplus, abs=2e-4), model


@pytest.mark.slow
@needs("paddle")
def test_paddle_counts_its_layers(counts):
    """paddle.flops' formulas count nn.Conv2D and nn.Linear in multiply-adds (half our FLOPs),
    a conv bias as one more per output element, and see no paddle.matmul outside a layer:
    neither attention nor the GPT's tied projection. So: half ours, plus the biased convs'
    outputs (biased_convs), less those products."""
    for model, counted in counts("paddle").items():
        ours, spec = OURS[model], SPECS[model]
        bias_adds = sum(conv.c_out * np.prod(conv.output_size) for conv in biased_convs(model))
        unseen = ours.attention + (MAC * spec.context * spec.width * spec.vocab
                                   if model == "gpt" else 0)
        assert counted["forward"] == (ours.forward_per_sample - unseen) / MAC + bias_adds, model
    assert counts("paddle")["resnet"]["layers"] == ["Conv2D", "Linear"]
