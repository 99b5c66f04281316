"""synthetic-hard: the striped images with classes that overlap unequally, so a default run lands
well short of 1.0 and its per-class scores differ; and ``synthetic`` left as it was."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import assert_scores_follow_predictions, needs, run_ok
from parbench.contract.data import (
    DATASET_NAMES,
    Dataset,
    load_dataset,
    load_synthetic,
    load_synthetic_hard,
)

# load_synthetic().fingerprint() computed from the code before synthetic-hard was added: records'
# spec hashes cover the data's fingerprint, so the difficulty knob must not move a bit of it
SYNTHETIC_FINGERPRINT = "4e15ea6012d4b0cfaf6a65f0c32068611d48da5d0acf9206faf14185cbc359cc"

# classes whose orientation (0, 24, 48 degrees) has a neighbour 24 degrees away, and those
# (96, 138 degrees) 42 degrees or more from any other; the class is orientation + 5 x frequency
CHAINED, APART = [0, 1, 2, 5, 6, 7], [3, 4, 8, 9]


def test_synthetic_is_bit_for_bit_what_it_was():
    assert load_synthetic().fingerprint() == SYNTHETIC_FINGERPRINT


def test_synthetic_hard_is_deterministic_shaped_balanced_and_standardised():
    data = load_dataset("synthetic-hard")
    assert "synthetic-hard" in DATASET_NAMES and data.name == "synthetic-hard"
    assert data.fingerprint() == load_synthetic_hard().fingerprint()
    assert data.fingerprint() != SYNTHETIC_FINGERPRINT
    assert data.x_train.shape == (4096, 3, 32, 32) and data.x_test.shape == (1024, 3, 32, 32)
    assert data.x_train.dtype == np.float32 and data.y_train.dtype == np.int64
    assert data.holds["classes"] == 10 and set(np.unique(data.y_test)) == set(range(10))
    # 4096 labels drawn uniformly: each class near 410; 350 is over 3 standard deviations off
    assert np.bincount(data.y_train, minlength=10).min() > 350
    assert abs(data.x_train.mean()) < 0.01 and abs(data.x_train.std() - 1) < 0.01


def spectrum(images: np.ndarray) -> np.ndarray:
    """Log amplitude spectrum per image, channels averaged: blind to the stripes' random phase,
    which makes every class's mean image grey, so a classifier on raw pixels would be at chance."""
    return np.log(np.abs(np.fft.rfft2(images)).mean(axis=1).reshape(len(images), -1))


def nearest_class_mean(data: Dataset) -> tuple[float, np.ndarray]:
    """Test accuracy and per-class recall of a nearest-class-mean classifier on ``spectrum``: a
    fixed, untrained-by-gradient yardstick of how far apart the classes lie."""
    train, test = spectrum(data.x_train), spectrum(data.x_test)
    means = np.stack([train[data.y_train == c].mean(axis=0) for c in range(data.holds["classes"])])
    predicted = ((test[:, None] - means[None]) ** 2).sum(axis=-1).argmin(axis=1)
    recall = np.array([np.mean(predicted[data.y_test == c] == c)
                       for c in range(data.holds["classes"])])
    return float(np.mean(predicted == data.y_test)), recall


def test_synthetic_hard_is_harder_and_unequally_so():
    easy, _ = nearest_class_mean(load_synthetic(1000, 500))
    hard, recall = nearest_class_mean(load_synthetic_hard(1000, 500))
    # measured: 1.0 on synthetic, 0.856 on synthetic-hard; above 0.5 it is still learnable
    assert easy > 0.99 and 0.5 < hard < 0.92
    # measured: the chained classes' mean recall 0.80, the far-apart ones' 0.95
    assert recall[APART].mean() > recall[CHAINED].mean() + 0.08


@needs("torch")
@pytest.mark.slow
def test_the_default_run_lands_short_of_saturation_with_unequal_classes(tmp_path):
    record = run_ok(tmp_path, "torch-single", "--dataset", "synthetic-hard")
    metrics = record["metrics"]
    assert record["dataset"] == "synthetic-hard" and record["steps"] == 64
    # measured 0.881 at seed 0 (0.805-0.881 over seeds 0-4): room to move either way
    assert 0.80 <= metrics["final_accuracy"] <= 0.95
    assert_scores_follow_predictions(metrics, load_synthetic_hard().y_test)
    # on synthetic all three read 0.999 to within 5e-5; here (seed 0) precision is 0.0026 and
    # recall 0.0019 off the accuracy
    scores = (metrics["precision_macro"], metrics["recall_macro"])
    assert scores != pytest.approx((metrics["final_accuracy"],) * 2, abs=1e-3)
    # the classes differ, not just the total: measured recall 0.73 to 0.99 at seed 0
    confusion = np.array(metrics["confusion_matrix"])
    recall = np.diag(confusion) / confusion.sum(axis=1)
    assert recall.max() - recall.min() > 0.1
