"""Scoring detections against the truth, framework-free: matching, precision, recall and F1
at a score threshold, and AP at one IoU threshold, overall and per object size.

The rules are COCO's (pycocotools' ``COCOeval`` for one category, one IoU threshold and
``maxDets`` = the predictions kept per image), so a COCO tool scoring the predictions file of a
run (``--save-predictions``) finds the record's AP:

* Per image, predictions in descending score order each take the still unmatched true box of
  highest IoU at or above the threshold (the last of equal ones), preferring a box of the size
  range scored over one outside it.
* Per size range, a true box outside the range is ignored, and so is a prediction matched to
  one, or unmatched with its own area outside the range.
* AP: the precision envelope read at 101 recall points (0, 0.01, ..., 1), from every image's
  predictions in one descending-score order (stable: images in order, then each image's own).

The size ranges are scaled to 64-pixel images: by COCO's ranges (small below 32x32 of a
photograph several hundred pixels wide) every face here would be small. ``small`` is an area
of at most 12x12 px, ``large`` above it: the faces drawn are 4 to 10 px or 16 to 32 px wide.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SIZE_RANGES = {"all": (0.0, 1e10), "small": (0.0, 144.0), "large": (144.0, 1e10)}
RECALL_POINTS = np.linspace(0.0, 1.0, 101)
MATCHED, UNMATCHED, IGNORED = 1, 0, -1  # what scoring makes of a prediction, per size range


def iou(predicted: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """[predictions, truths] intersection over union of x y w h boxes (no +1 pixel)."""
    p, t = np.asarray(predicted, np.float64)[:, None], np.asarray(truth, np.float64)[None]
    width = np.minimum(p[..., 0] + p[..., 2], t[..., 0] + t[..., 2]) - np.maximum(p[..., 0],
                                                                               t[..., 0])
    height = np.minimum(p[..., 1] + p[..., 3], t[..., 1] + t[..., 3]) - np.maximum(p[..., 1],
                                                                                t[..., 1])
    inter = np.clip(width, 0, None) * np.clip(height, 0, None)
    union = p[..., 2] * p[..., 3] + t[..., 2] * t[..., 3] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


def _outside(areas: np.ndarray, size_range: tuple[float, float]) -> np.ndarray:
    return (areas < size_range[0]) | (areas > size_range[1])


def match_image(predicted: np.ndarray, truth: np.ndarray, size_range: tuple[float, float],
                iou_threshold: float) -> np.ndarray:
    """MATCHED, UNMATCHED or IGNORED for each of one image's predictions ([n, 4], best score
    first) against its true boxes ([m, 4]), for one size range (COCO's rules, above)."""
    truth = np.asarray(truth, np.float64).reshape(-1, 4)
    ignored_truth = _outside(truth[:, 2] * truth[:, 3], size_range)
    order = np.argsort(ignored_truth, kind="stable")  # kept boxes first
    truth, ignored_truth = truth[order], ignored_truth[order]
    overlaps = iou(predicted, truth) if len(truth) else np.zeros((len(predicted), 0))
    taken = np.zeros(len(truth), bool)
    outcome = np.full(len(predicted), UNMATCHED)
    for p in range(len(predicted)):
        best, chosen = min(iou_threshold, 1 - 1e-10), -1
        for t in range(len(truth)):
            if taken[t]:
                continue
            if chosen > -1 and not ignored_truth[chosen] and ignored_truth[t]:
                break
            if overlaps[p, t] < best:
                continue
            best, chosen = overlaps[p, t], t
        if chosen > -1:
            taken[chosen] = True
            outcome[p] = IGNORED if ignored_truth[chosen] else MATCHED
    areas = np.asarray(predicted, np.float64).reshape(-1, 4)
    outcome[(outcome == UNMATCHED) & _outside(areas[:, 2] * areas[:, 3], size_range)] = IGNORED
    return outcome


def counted_truths(truth: np.ndarray, size_range: tuple[float, float]) -> int:
    """The true boxes of an image a size range scores."""
    truth = np.asarray(truth, np.float64).reshape(-1, 4)
    return int(np.count_nonzero(~_outside(truth[:, 2] * truth[:, 3], size_range)))


@dataclass(frozen=True)
class Scores:
    """One size range's figures over a set of images."""

    precision: float  # at the score threshold: matched / kept predictions (0 when none kept)
    recall: float  # at the score threshold: matched / true boxes
    f1: float
    ap50: float | None  # None when the range has no true box (COCO's -1)
    objects: int  # true boxes counted
    predictions: int  # predictions kept at the score threshold

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def average_precision(scores: np.ndarray, outcomes: np.ndarray, truths: int) -> float | None:
    """COCO's 101-point AP from every prediction's score and outcome (in the stable order
    described above) and the count of true boxes."""
    if truths == 0:
        return None
    if len(scores) == 0:
        return 0.0
    order = np.argsort(-np.asarray(scores, np.float64), kind="mergesort")
    outcomes = np.asarray(outcomes)[order]
    kept = outcomes != IGNORED
    true_pos = np.cumsum((outcomes == MATCHED) & kept).astype(float)
    false_pos = np.cumsum((outcomes == UNMATCHED) & kept).astype(float)
    recall = true_pos / truths
    precision = true_pos / (true_pos + false_pos + np.spacing(1))
    envelope = np.maximum.accumulate(precision[::-1])[::-1]
    at = np.searchsorted(recall, RECALL_POINTS, side="left")
    read = envelope[np.minimum(at, len(envelope) - 1)]
    return float(np.mean(np.where(at < len(envelope), read, 0.0)))


def score(scores: np.ndarray, outcomes: np.ndarray, truths: int,
          score_threshold: float) -> Scores:
    """Precision, recall and F1 at ``score_threshold`` and AP, from predictions' scores and
    outcomes in one size range."""
    scores, outcomes = np.asarray(scores, np.float64), np.asarray(outcomes)
    kept = (scores >= score_threshold) & (outcomes != IGNORED)
    matched = int(np.count_nonzero(kept & (outcomes == MATCHED)))
    predictions = int(np.count_nonzero(kept))
    precision = matched / predictions if predictions else 0.0
    recall = matched / truths if truths else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return Scores(precision, recall, f1, average_precision(scores, outcomes, truths),
                  truths, predictions)
