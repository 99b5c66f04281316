"""The language-model task's token data: the synthetic Markov language's exact loss floor (the
true model's measured loss on sampled windows lands on it; nothing fitted to the samples goes
below it), and byte windows of a text file with their errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from parbench.contract.data import DatasetError
from parbench.contract.language import MarkovLanguage, text_windows

VOCAB, CONTEXT = 16, 32


@pytest.fixture(scope="module")
def language() -> MarkovLanguage:
    return MarkovLanguage.from_seed(VOCAB, seed=0)


def true_model_losses(language: MarkovLanguage, windows: np.ndarray) -> np.ndarray:
    """[windows, context] negative log-likelihoods of each next token under the chain itself:
    from the stationary pair distribution at the first prediction, the transition after."""
    pi = language.pair_distribution
    first = pi / pi.sum(axis=1, keepdims=True)  # P(x1 | x0)
    losses = [-np.log(first[windows[:, 0], windows[:, 1]])]
    for t in range(2, windows.shape[1]):
        losses.append(-np.log(language.transition[windows[:, t - 2], windows[:, t - 1],
                                                  windows[:, t]]))
    return np.stack(losses, axis=1)


def test_the_chain_is_a_distribution_with_sparse_rows(language):
    transition = language.transition
    assert transition.shape == (VOCAB,) * 3
    assert np.allclose(transition.sum(axis=-1), 1, atol=1e-12)
    noise_floor = 0.05 / VOCAB
    assert np.all(transition >= noise_floor - 1e-15)  # every transition possible
    above = (transition > noise_floor + 1e-12).sum(axis=-1)
    assert above.max() <= 4 and above.min() >= 1  # at most `branching` favoured successors
    again = MarkovLanguage.from_seed(VOCAB, seed=0).transition
    assert np.array_equal(transition, again)
    assert not np.array_equal(transition, MarkovLanguage.from_seed(VOCAB, seed=1).transition)


def test_the_pair_distribution_is_stationary(language):
    pi = language.pair_distribution
    assert pi.sum() == pytest.approx(1, abs=1e-12) and pi.min() > 0
    assert np.allclose(np.einsum("ab,abc->bc", pi, language.transition), pi, atol=1e-12)
    assert np.allclose(pi.sum(axis=0), pi.sum(axis=1), atol=1e-12)  # one token marginal


def test_the_floor_orders_as_information_does(language):
    rate, first = language.entropy_rate(), language.first_step_entropy()
    assert 0 < rate < first < math.log(VOCAB)  # two tokens tell more than one, one than none
    floor = language.loss_floor(CONTEXT)
    assert floor == pytest.approx((first + (CONTEXT - 1) * rate) / CONTEXT)
    assert rate < floor < first


def test_the_true_models_loss_on_sampled_windows_is_the_floor(language):
    windows = language.windows(4000, CONTEXT + 1, seed=3)
    assert windows.shape == (4000, CONTEXT + 1) and windows.dtype == np.int64
    assert windows.min() >= 0 and windows.max() < VOCAB
    per_window = true_model_losses(language, windows).mean(axis=1)
    error = per_window.std(ddof=1) / math.sqrt(len(per_window))
    assert abs(per_window.mean() - language.loss_floor(CONTEXT)) < 4 * error
    first_step = true_model_losses(language, windows)[:, 0]
    assert abs(first_step.mean() - language.first_step_entropy()) < 4 * (
        first_step.std(ddof=1) / math.sqrt(len(first_step)))


def test_counts_fitted_to_the_samples_do_not_beat_the_floor_on_new_windows(language):
    """Order-2 counts from 4000 training windows, scored on 2000 fresh ones: a model learnt
    from data cannot go below the floor, and gets close to it with this much data."""
    train = language.windows(4000, CONTEXT + 1, seed=4)
    counts = np.full((VOCAB,) * 3, 0.1)
    np.add.at(counts, (train[:, :-2].ravel(), train[:, 1:-1].ravel(), train[:, 2:].ravel()), 1)
    fitted = MarkovLanguage(counts / counts.sum(axis=-1, keepdims=True))
    fresh = language.windows(2000, CONTEXT + 1, seed=5)
    later = true_model_losses(fitted, fresh)[:, 1:].mean()  # the predictions from two tokens
    assert language.entropy_rate() < later < language.entropy_rate() + 0.1


@pytest.mark.parametrize("call,message", [
    (lambda: MarkovLanguage.from_seed(1, seed=0), "at least 2 tokens"),
    (lambda: MarkovLanguage.from_seed(8, seed=0, branching=9), "branching must be in 2..8"),
    (lambda: MarkovLanguage.from_seed(8, seed=0, noise=0.0), "noise must be in"),
    (lambda: MarkovLanguage.from_seed(8, seed=0, noise=1.5), "noise must be in"),
    (lambda: MarkovLanguage.from_seed(8, seed=0).windows(4, 1, seed=0), "length >= 2"),
])
def test_settings_that_make_no_language_are_refused(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_windows_are_deterministic_per_seed(language):
    assert np.array_equal(language.windows(50, 9, seed=7), language.windows(50, 9, seed=7))
    assert not np.array_equal(language.windows(50, 9, seed=7), language.windows(50, 9, seed=8))


def test_text_becomes_consecutive_byte_windows_with_the_end_held_out(tmp_path):
    text = "Call me Ishmael. Some years ago -- never mind how long precisely -- ünï. " * 20
    path = tmp_path / "book.txt"
    path.write_text(text, encoding="utf-8")
    train, validation = text_windows(path, context=15)
    raw = np.frombuffer(text.encode("utf-8"), np.uint8).astype(np.int64)
    count = len(raw) // 16
    assert len(train) + len(validation) == count and len(validation) == round(count * 0.1)
    assert np.array_equal(np.concatenate([train, validation]).ravel(), raw[:count * 16])
    assert train.dtype == np.int64 and train.max() > 127  # multi-byte characters kept as bytes


@pytest.mark.parametrize("content,message", [
    (None, "text file not found"),
    (b"", "text file is empty"),
    (b"caf\xe9 au lait", "not UTF-8 text"),
    (b"too short", "text file too short"),
])
def test_bad_text_files_are_one_clear_error(tmp_path, content, message):
    path = tmp_path / "input.txt"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(DatasetError, match=message) as raised:
        text_windows(path, context=64)
    assert str(path) in str(raised.value) and "\n" not in str(raised.value)


def test_a_context_of_no_tokens_is_refused(tmp_path):
    (tmp_path / "input.txt").write_text("some text")
    with pytest.raises(ValueError, match="context must be at least 1, got 0"):
        text_windows(tmp_path / "input.txt", context=0)
