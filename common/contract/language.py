"""Token data for the language-model task: windows of ``context + 1`` tokens, of which a model
reads the first ``context`` and predicts every next one.

Three sources, all deterministic:

* ``MarkovLanguage``: a synthetic language drawn from a seed, an order-2 Markov chain over
  ``vocab`` tokens, whose loss floor parbench computes exactly (no model can score a lower
  expected validation loss on its windows), so a record can state how far a model is from it.
* ``random-tokens``: tokens drawn uniformly and independently, at any vocabulary (GPT-2's 50257
  for --preset gpt2-small): for speed and memory at the published sizes. Its floor is ln(vocab):
  no token tells anything of the next.
* ``text_windows``: the bytes of a UTF-8 text file as tokens (vocabulary 256: nothing to
  download, no tokenizer to port), cut into consecutive windows; the last tenth of the file is
  the validation split, so no validation window overlaps a training one.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from .data import Dataset, DatasetError

LANGUAGE_DATASETS = ("markov", "random-tokens", "text")
MARKOV_SEEDS = {"language": 0, "train": 1, "validation": 2}  # fixed, as the synthetic images'
MARKOV_WINDOWS = {"train": 4096, "validation": 512}
# random-tokens: a global batch of 256 rows, and a validation whose evaluation stays short on a
# CPU (2 rows of GPT-2 small's 1024 tokens: 0.5 TFLOP, 4 s in torch on 2 AMD EPYC cores; more
# devices than rows evaluate empty chunks, as a sharded model's ranks already may)
RANDOM_WINDOWS = {"train": 256, "validation": 2, "seed": 4}
MARKOV_MAX_VOCAB = 512  # its transition table has vocab**3 entries: 1 GiB at 512
DEFAULT_CONTEXT, DEFAULT_VOCAB = 64, 64
TEXT_VOCAB = 256  # bytes
VALIDATION_SHARE = 0.1  # of a text file's windows, from its end
STATIONARY_TOLERANCE = 1e-13  # power iteration stops when no pair probability moves more


@dataclass(frozen=True)
class MarkovLanguage:
    """P(next token | the two before it), as ``transition[a, b, c]``.

    Each context (a, b) allows ``branching`` successors with Dirichlet(1) weights, mixed with
    the uniform distribution at weight ``noise``: every transition is possible, so the chain
    over token pairs is irreducible and aperiodic and has one stationary distribution, the one
    windows start from."""

    transition: np.ndarray  # [vocab, vocab, vocab] float64, each [a, b] sums to 1

    @classmethod
    def from_seed(cls, vocab: int, seed: int, branching: int = 4,
                  noise: float = 0.05) -> MarkovLanguage:
        if vocab < 2:
            raise ValueError(f"a language needs at least 2 tokens, got vocabulary {vocab}")
        if not 2 <= branching <= vocab:
            raise ValueError(f"branching must be in 2..{vocab}, got {branching}")
        if not 0 < noise <= 1:  # 0 would allow a chain with several stationary distributions
            raise ValueError(f"noise must be in (0, 1], got {noise}")
        rng = np.random.default_rng(seed)
        successors = np.argsort(rng.random((vocab, vocab, vocab)), axis=-1)[..., :branching]
        weights = np.zeros((vocab, vocab, vocab))
        np.put_along_axis(weights, successors,
                          rng.dirichlet(np.ones(branching), size=(vocab, vocab)), axis=-1)
        return cls((1 - noise) * weights + noise / vocab)

    @property
    def vocab(self) -> int:
        return self.transition.shape[0]

    @cached_property
    def pair_distribution(self) -> np.ndarray:
        """pi[a, b]: the stationary probability that tokens a, b follow each other, by power
        iteration of the pair chain (a, b) -> (b, c); computed once (vocabulary 256: ~0.5 s)."""
        pi = np.full((self.vocab, self.vocab), 1.0 / self.vocab ** 2)
        for _ in range(100_000):
            following = np.einsum("ab,abc->bc", pi, self.transition)
            if np.abs(following - pi).max() < STATIONARY_TOLERANCE:
                return following
            pi = following
        raise RuntimeError("the pair chain did not reach its stationary distribution")

    def entropy_rate(self) -> float:
        """H(next | two before), nats: the expected loss of the true model once a window has
        shown it two tokens (earlier ones tell it nothing more)."""
        return float(np.sum(self.pair_distribution * _entropy(self.transition)))

    def first_step_entropy(self) -> float:
        """H(X1 | X0), nats: the expected loss of the true model at a window's first
        prediction, where it has seen one token."""
        pi = self.pair_distribution
        return float(_entropy(pi.ravel()) - _entropy(pi.sum(axis=1)))

    def loss_floor(self, context: int) -> float:
        """The lowest expected mean loss over a window's ``context`` predictions: one made
        from one token, the rest from two or more."""
        return (self.first_step_entropy() + (context - 1) * self.entropy_rate()) / context

    def windows(self, count: int, length: int, seed: int) -> np.ndarray:
        """``count`` independent windows of ``length`` tokens, [count, length] int64: each
        starts from the stationary pair distribution and follows the chain."""
        if count < 1 or length < 2:
            raise ValueError(f"windows need count >= 1 and length >= 2, got {count}, {length}")
        rng = np.random.default_rng(seed)
        vocab = self.vocab
        first = rng.choice(vocab * vocab, size=count, p=self.pair_distribution.ravel())
        tokens = np.empty((count, length), np.int64)
        tokens[:, 0], tokens[:, 1] = np.divmod(first, vocab)
        cumulative = self.transition.cumsum(axis=-1)
        for t in range(2, length):
            drawn = rng.random((count, 1))
            below = (cumulative[tokens[:, t - 2], tokens[:, t - 1]] < drawn).sum(axis=-1)
            tokens[:, t] = np.minimum(below, vocab - 1)  # a sum rounded below 1
        return tokens


def _entropy(probabilities: np.ndarray) -> np.ndarray:
    """Entropy in nats over the last axis (0 log 0 = 0)."""
    p = np.asarray(probabilities, np.float64)
    logs = np.log(p, out=np.zeros_like(p), where=p > 0)
    return -np.sum(p * logs, axis=-1)


def text_windows(path: Path, context: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, validation) windows of ``context + 1`` byte tokens from a UTF-8 text file,
    [windows, context + 1] int64 each, consecutive and not overlapping; validation is the last
    VALIDATION_SHARE of them (at least one)."""
    if context < 1:
        raise ValueError(f"context must be at least 1, got {context}")
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise DatasetError(f"text file not found: {path}") from None
    except OSError as err:
        raise DatasetError(f"text file cannot be read: {path} ({err.strerror})") from None
    if not raw:
        raise DatasetError(f"text file is empty: {path}")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DatasetError(f"not UTF-8 text: {path} (byte {err.start}: "
                           f"{raw[err.start:err.start + 1]!r})") from None
    count = len(raw) // (context + 1)
    if count < 2:
        raise DatasetError(f"text file too short: {path} has {len(raw)} bytes, fewer than 2 "
                           f"windows of {context + 1} (one to train on, one to validate)")
    tokens = np.frombuffer(raw, np.uint8)[:count * (context + 1)].astype(np.int64)
    windows = tokens.reshape(count, context + 1)
    held_out = max(1, round(count * VALIDATION_SHARE))
    return windows[:-held_out], windows[-held_out:]


def language_dataset(windows_train: np.ndarray, windows_validation: np.ndarray, name: str,
                     vocab: int, loss_floor: float | None = None) -> Dataset:
    """Windows as the shared Dataset: a row's input is its first ``context`` tokens, its
    labels the ``context`` that follow each of them (int64 both)."""
    return Dataset(name, windows_train[:, :-1], windows_train[:, 1:], windows_validation[:, :-1],
                   windows_validation[:, 1:], {"vocabulary": vocab, "loss_floor": loss_floor})


def random_tokens(vocab: int, context: int) -> Dataset:
    """Uniform, independent tokens in windows of ``context + 1``; the floor is ln(vocab)."""
    rng = np.random.default_rng(RANDOM_WINDOWS["seed"])
    train, validation = (rng.integers(0, vocab, (RANDOM_WINDOWS[split], context + 1),
                                      dtype=np.int64) for split in ("train", "validation"))
    return language_dataset(train, validation, "random-tokens", vocab, float(np.log(vocab)))


def load_language(name: str, data_path: Path | None, context: int | None,
                  vocab: int | None) -> Dataset:
    """``markov`` (the synthetic language: ``vocab`` tokens, its floor stated),
    ``random-tokens`` (uniform tokens, floor ln(vocab)) or ``text``
    (the bytes of the UTF-8 file at ``data_path``), cut into windows of ``context + 1``."""
    context = DEFAULT_CONTEXT if context is None else context
    if name == "markov":
        language = MarkovLanguage.from_seed(DEFAULT_VOCAB if vocab is None else vocab,
                                            MARKOV_SEEDS["language"])
        train, validation = (language.windows(MARKOV_WINDOWS[split], context + 1,
                                              MARKOV_SEEDS[split])
                             for split in ("train", "validation"))
        return language_dataset(train, validation, name, language.vocab,
                                language.loss_floor(context))
    if name == "random-tokens":
        return random_tokens(DEFAULT_VOCAB if vocab is None else vocab, context)
    if name != "text":
        raise DatasetError(f"unknown token dataset {name!r}; choose one of "
                           f"{', '.join(LANGUAGE_DATASETS)}")
    if vocab is not None and vocab != TEXT_VOCAB:
        raise DatasetError(f"--dataset text has byte tokens: its vocabulary is {TEXT_VOCAB}, "
                           f"not --vocab {vocab}")
    if data_path is None:
        raise DatasetError("--dataset text needs --data-dir: the path of a UTF-8 text file")
    return language_dataset(*text_windows(data_path, context), name, TEXT_VOCAB)
