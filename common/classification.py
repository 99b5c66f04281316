"""Classification metrics beyond accuracy, from a confusion matrix that ranks sum exactly like
the accuracy counts: rows are true classes, columns predicted ones."""

from __future__ import annotations

import numpy as np


def confusion_matrix(labels: np.ndarray, predicted: np.ndarray, classes: int) -> np.ndarray:
    """counts[true, predicted] over the given rows."""
    flat = np.asarray(labels, np.int64) * classes + np.asarray(predicted, np.int64)
    return np.bincount(flat, minlength=classes * classes).reshape(classes, classes)


def macro_scores(confusion: np.ndarray) -> dict[str, float]:
    """Macro-averaged precision, recall and F1: the unweighted mean over classes. A class never
    predicted has precision 0, one never present recall 0, and F1 0 where both are 0 (the
    zero_division=0 convention of scikit-learn)."""
    confusion = np.asarray(confusion, np.float64)
    hits = np.diag(confusion)
    predicted, present = confusion.sum(axis=0), confusion.sum(axis=1)
    precision = np.divide(hits, predicted, out=np.zeros_like(hits), where=predicted > 0)
    recall = np.divide(hits, present, out=np.zeros_like(hits), where=present > 0)
    both = precision + recall
    f1 = np.divide(2 * precision * recall, both, out=np.zeros_like(hits), where=both > 0)
    return {"precision_macro": float(precision.mean()), "recall_macro": float(recall.mean()),
            "f1_macro": float(f1.mean())}
