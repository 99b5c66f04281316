"""The language model's contract, framework-free: the GPT spec and its canonical weights, the
language-modeling task's counts and scores (oracles written from the definitions), the token
datasets as the harness loads them, and every input that must be refused before anything runs.
The frameworks' GPTs are checked against each other in tests/test_gpt.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_cli import assert_refused

from conftest import parbench
from parbench.base.errors import UsageError
from parbench.contract.language import MARKOV_SEEDS, MarkovLanguage, load_language
from parbench.contract.spec import (
    GPTSpec,
    Role,
    build_spec,
    parameter_count,
    parameters,
    spec_dict,
    spec_from_dict,
)
from parbench.contract.tasks import LanguageModeling, task_of_dataset, task_of_model
from parbench.contract.weights import initial_weights
from parbench.launch.config import RunConfig, resolve
from parbench.launch.harness import prepare

SPEC = GPTSpec(vocab=64, context=16)


def test_the_gpt_has_the_canonical_tensors_and_ties_its_output_to_the_embedding():
    params = parameters(SPEC)
    assert params["token_embedding"].shape == (64, 64)
    assert params["token_embedding"].role is Role.TOKEN_EMBEDDING
    assert params["position_embedding"].shape == (16, 64)
    assert params["blocks.1.attn.qkv.weight"].shape == (192, 64)
    assert params["blocks.0.mlp.fc1.weight"].shape == (256, 64)
    # tied: no head and no output bias; the embedding is the projection
    assert not any(name.startswith("head") for name in params)
    # embeddings 64*64 + 16*64, per block 2 norms + qkv + proj + fc1 + fc2, final norm
    block = 2 * 128 + (192 * 64 + 192) + (64 * 64 + 64) + (256 * 64 + 256) + (64 * 256 + 64)
    assert parameter_count(SPEC) == 64 * 64 + 16 * 64 + 2 * block + 128


def test_the_embeddings_decay_and_are_drawn_with_std_002():
    params = parameters(SPEC)
    assert params["token_embedding"].decays and params["position_embedding"].decays
    assert not params["norm.weight"].decays and not params["blocks.0.attn.qkv.bias"].decays
    weights = initial_weights(SPEC, seed=3)
    assert weights["token_embedding"].dtype == np.float32
    assert abs(float(weights["token_embedding"].std()) - 0.02) < 0.002
    assert np.array_equal(weights["token_embedding"], initial_weights(SPEC, 3)["token_embedding"])
    assert not np.array_equal(weights["token_embedding"],
                              initial_weights(SPEC, 4)["token_embedding"])


def test_a_gpt_spec_survives_the_job_file_and_checks_its_heads():
    assert spec_from_dict(spec_dict(SPEC)) == SPEC
    assert build_spec("gpt", (32,), 100) == GPTSpec(vocab=100, context=32)
    with pytest.raises(ValueError, match="3 heads do not divide the width 64"):
        GPTSpec(vocab=8, context=4, heads=3).check()


def test_the_task_counts_tokens_and_scores_from_the_summed_counts():
    task = LanguageModeling(5, context=3, loss_floor=1.25)
    assert task.context == 3 and task.items(10) == 30
    labels = np.array([[0, 1, 2], [3, 4, 0]])
    predicted = np.array([[0, 1, 1], [3, 0, 0]])
    counts = task.eval_counts(labels, predicted, 9.0)
    assert counts.tolist() == [4, 6, 2, 9.0]
    # a second rank's rows: the scores come from the sums, as one rank would compute them
    other = task.eval_counts(np.array([[1, 1, 1]]), np.array([[1, 2, 3]]), 3.0)
    scores = task.eval_scores(counts + other)
    assert scores["accuracy"] == 5 / 9 and scores["loss"] == 12.0 / 9
    assert scores["count"] == 3 and scores["tokens"] == 9
    assert scores["perplexity"] == pytest.approx(math.exp(12.0 / 9))
    assert task.extra_metrics(scores) == {"loss_floor": 1.25, "floor_gap": 12.0 / 9 - 1.25}
    assert LanguageModeling(5, context=3).extra_metrics(scores) == {"loss_floor": None,
                                                                  "floor_gap": None}
    assert task.count_size == 4


def test_a_target_below_the_languages_floor_is_ruled_out_and_one_at_it_is_not():
    task = LanguageModeling(5, context=3, loss_floor=1.25)
    loss, perplexity, accuracy = (task.target_of(m) for m in ("loss", "perplexity", "accuracy"))
    assert task.unreachable(loss, 1.2499) == ("--target 1.2499 is below the language's floor "
                                              "for loss (1.25): no model can reach it")
    assert task.unreachable(loss, 1.25) is None and task.unreachable(loss, 2.0) is None
    floor = math.exp(1.25)  # 3.49: perplexity's floor is the loss floor's exponential
    assert "for perplexity (3.49)" in task.unreachable(perplexity, floor - 1e-3)
    assert task.unreachable(perplexity, floor + 1e-3) is None
    assert task.unreachable(accuracy, 0.99) is None  # no floor stated for accuracy
    assert LanguageModeling(5, context=3).unreachable(loss, 0.01) is None  # text: no floor


def test_the_probe_batch_is_token_ids_of_the_vocabulary():
    task = LanguageModeling(5, context=3)
    probe = task.probe_batch(400, np.random.default_rng(0))
    assert probe.shape == (400, 16) and probe.dtype == np.int64  # parity's 16-token rows
    assert sorted(np.unique(probe).tolist()) == [0, 1, 2, 3, 4]


def test_the_task_is_made_from_what_its_dataset_holds():
    data = LanguageModeling.load("markov", None, {"context": 6, "vocab": 7})
    task = LanguageModeling.from_data(data)
    assert (task.classes, task.context) == (7, 6)
    assert task.loss_floor == MarkovLanguage.from_seed(7, MARKOV_SEEDS["language"]).loss_floor(6)


def test_models_and_datasets_belong_to_one_task_each():
    assert task_of_model("gpt") is LanguageModeling
    assert task_of_dataset("markov") is LanguageModeling is task_of_dataset("text")
    assert task_of_model("vit") is not LanguageModeling


def test_markov_rows_are_windows_whose_labels_are_the_next_tokens():
    data = load_language("markov", None, context=16, vocab=32)
    assert data.x_train.shape == (4096, 16) and data.x_test.shape == (512, 16)
    assert data.x_train.dtype == np.int64 == data.y_train.dtype
    assert np.array_equal(data.y_train[:, :-1], data.x_train[:, 1:])
    assert data.holds["vocabulary"] == 32 and data.input_shape == (16,)
    assert data.holds["loss_floor"] == pytest.approx(MarkovLanguage.from_seed(32, 0).loss_floor(16))
    again = load_language("markov", None, context=16, vocab=32)
    assert data.fingerprint() == again.fingerprint()


def test_a_text_file_becomes_byte_windows(tmp_path):
    text = tmp_path / "book.txt"
    text.write_text("ab" * 500, encoding="utf-8")
    data = load_language("text", text, context=9, vocab=None)
    assert data.holds["vocabulary"] == 256 and data.holds["loss_floor"] is None
    assert len(data.x_train) + len(data.x_test) == 100  # 1000 bytes, windows of 10
    assert data.x_train[0].tolist() == [97, 98] * 4 + [97]
    assert data.y_train[0].tolist() == [98, 97] * 4 + [98]


def test_gpt_defaults_to_the_synthetic_language_and_adamw():
    cfg = RunConfig(model="gpt")
    assert (cfg.dataset, cfg.optimizer) == ("markov", "adamw")
    assert (RunConfig().dataset, RunConfig().optimizer) == ("synthetic", "sgd")
    assert resolve(RunConfig(model="gpt", steps=3)).optimizer.name == "adamw"


@pytest.mark.parametrize("values,fragment", [
    (dict(model="gpt", dataset="synthetic"), "--model gpt is a model of language-modeling"),
    (dict(model="vit", dataset="markov"), "--dataset markov is not image-classification"),
    (dict(model="gpt", dataset="text"), "--dataset text needs --data-dir PATH"),
    (dict(model="gpt", dataset="text", data_dir="/"), "--data-dir / does not exist or is not a "
                                                      "file"),
    (dict(model="resnet", context=32), "--context is an option of the token datasets"),
    (dict(model="gpt", context=0), "--context must be in [1, 4096], got 0"),
    (dict(model="gpt", vocab=1), "--vocab must be in [2, 1000000], got 1"),
    (dict(model="gpt", vocab=600), "--vocab 600: --dataset markov's table has vocab**3 entries, "
                                   "so at most 512; --dataset random-tokens takes any vocabulary"),
    (dict(model="gpt", sync_bn=True, backend="torch-ddp"), "--sync-bn needs a model with "
                                                           "BatchNorm"),
])
def test_language_options_that_cannot_work_are_refused(values, fragment):
    with pytest.raises(UsageError, match=None) as refused:
        resolve(RunConfig.of(**values))
    assert fragment in str(refused.value)


def test_vocab_is_refused_for_byte_text(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("x" * 1000)
    with pytest.raises(UsageError, match="--dataset text has byte tokens"):
        resolve(RunConfig(model="gpt", dataset="text", data_dir=str(text), vocab=64))


@pytest.mark.parametrize("content,fragment", [
    (b"", "text file is empty"),
    (b"ok \xff\xfe", "not UTF-8 text"),
    (b"short", "text file too short"),
    ("a" * 650, "global batch 128 exceeds the 9 training rows of --dataset text"),
])
def test_a_text_file_that_cannot_train_is_refused_before_anything_runs(tmp_path, content,
                                                                        fragment):
    text = tmp_path / "book.txt"
    text.write_bytes(content if isinstance(content, bytes) else content.encode())
    shared = tmp_path / "shared"
    shared.mkdir()
    with pytest.raises(UsageError) as refused:
        prepare(RunConfig(model="gpt", dataset="text", data_dir=str(text)), shared)
    assert fragment in str(refused.value)
    assert not any(shared.iterdir())


def test_the_command_line_refuses_a_text_file_that_is_not_text(tmp_path):
    text = tmp_path / "book.bin"
    text.write_bytes(bytes(range(256)) * 40)
    out = tmp_path / "runs"
    assert_refused(parbench("run", "torch-single", "--model", "gpt", "--dataset", "text",
                            "--data-dir", str(text), "--out", str(out)), out, "not UTF-8 text")


def test_the_gpt_takes_its_sizes_from_the_options_and_its_mlp_follows_the_width():
    spec = build_spec("gpt", (16,), 64, {"width": 32, "depth": 3, "heads": 2})
    assert (spec.width, spec.depth, spec.heads, spec.mlp_width) == (32, 3, 2, 128)
    assert parameters(spec)["blocks.2.mlp.fc1.weight"].shape == (128, 32)
    assert RunConfig(model="gpt", width=32).model_sizes() == {"width": 32}


@pytest.mark.parametrize("values,fragment", [
    (dict(model="resnet", width=32),
     "--width is an option of --model gpt / vit, not of --model resnet"),
    (dict(model="vit", width=30), "vit: 4 heads do not divide the width 30"),
    (dict(model="gpt", width=30), "4 heads do not divide the width 30"),
    (dict(model="gpt", heads=0), "--heads must be in [1, 4096], got 0"),
    (dict(model="gpt", depth=5000), "--depth must be in [1, 4096], got 5000"),
])
def test_sizes_that_make_no_model_are_refused_before_any_data(values, fragment):
    with pytest.raises(UsageError) as refused:
        resolve(RunConfig.of(**values))
    assert fragment in str(refused.value)


def test_the_sizes_reach_the_trained_spec(tmp_path):
    prepared = prepare(RunConfig(model="gpt", context=8, width=16, depth=1, heads=2), tmp_path)
    assert (prepared.spec.width, prepared.spec.depth, prepared.spec.heads) == (16, 1, 2)
    assert prepared.spec.context == 8
