"""The detection task's scoring (parbench.contract.boxes) against pycocotools, the reference
every COCO tool agrees with, and the label encoding and decoding it scores
(parbench.contract.detection)."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import numpy as np
import pytest

from parbench.contract import boxes, detection


def random_image(rng: np.random.Generator, truths: int, predictions: int):
    """True boxes of both sizes, and predictions: some near a true box (so they match at
    various IoUs), some anywhere, with scores that tie now and then."""
    side = rng.choice([6.0, 9.0, 11.0, 12.0, 13.0, 20.0, 28.0], truths)
    truth = np.column_stack([rng.uniform(0, 40, (truths, 2)), side, side + rng.integers(0, 3,
                                                                                       truths)])
    near = truth[rng.integers(0, truths, predictions)] if truths else np.zeros((predictions, 4))
    jitter = rng.normal(0, 1.5, (predictions, 4))
    anywhere = np.column_stack([rng.uniform(0, 50, (predictions, 2)),
                                rng.uniform(3, 30, (predictions, 2))])
    predicted = np.where(rng.random((predictions, 1)) < 0.7, near + jitter, anywhere)
    predicted[:, 2:] = np.abs(predicted[:, 2:]) + 1
    scores = np.round(rng.uniform(0, 1, predictions), 2)  # rounded: ties happen
    order = np.argsort(-scores, kind="stable")
    return truth, predicted[order], scores[order]


def coco_ap50(images) -> list[float | None]:
    """pycocotools' AP at IoU 0.5 for the ranges all, small, large."""
    from pycocotools.coco import COCO

    annotations, results = [], []
    for image_id, (truth, predicted, scores) in enumerate(images):
        for x, y, w, h in truth:
            annotations.append({"id": len(annotations) + 1, "image_id": image_id,
                                "category_id": 1, "bbox": [x, y, w, h], "area": w * h,
                                "iscrowd": 0})
        results += [{"image_id": image_id, "category_id": 1, "bbox": list(map(float, box)),
                     "score": float(s)} for box, s in zip(predicted, scores)]
    truth_api = COCO()
    truth_api.dataset = {"info": {}, "images": [{"id": i} for i in range(len(images))],
                         "annotations": annotations, "categories": [{"id": 1, "name": "face"}]}
    with contextlib.redirect_stdout(io.StringIO()):
        truth_api.createIndex()
    return ap50_per_range(truth_api, results)


def coco_evaluation(instances: Path, results: list[dict]) -> float:
    """pycocotools' overall AP at IoU 0.5 of ``results`` against an instances.json."""
    from pycocotools.coco import COCO

    with contextlib.redirect_stdout(io.StringIO()):
        truth_api = COCO(str(instances))
    return ap50_per_range(truth_api, results)[0]


def ap50_per_range(truth_api, results: list[dict]) -> list[float | None]:
    from pycocotools.cocoeval import COCOeval

    with contextlib.redirect_stdout(io.StringIO()):
        evaluation = COCOeval(truth_api, truth_api.loadRes(results), "bbox")
        evaluation.params.iouThrs = np.array([0.5])
        evaluation.params.maxDets = [detection.TOP_K]
        evaluation.params.areaRng = [list(r) for r in boxes.SIZE_RANGES.values()]
        evaluation.params.areaRngLbl = list(boxes.SIZE_RANGES)
        evaluation.evaluate()
        evaluation.accumulate()
    precision = evaluation.eval["precision"][0, :, 0, :, 0]  # [recall points, ranges]
    return [float(np.mean(p[p > -1])) if (p > -1).any() else None for p in precision.T]


def ours_ap50(images) -> list[float]:
    found = []
    for size_range in boxes.SIZE_RANGES.values():
        outcomes = [boxes.match_image(predicted, truth, size_range, 0.5)
                    for truth, predicted, _ in images]
        truths = sum(boxes.counted_truths(truth, size_range) for truth, _, _ in images)
        found.append(boxes.average_precision(np.concatenate([s for _, _, s in images]),
                                             np.concatenate(outcomes), truths))
    return found


@pytest.mark.parametrize("seed", range(6))
def test_ap50_is_pycocotools_for_every_size_range(seed):
    """Overall, small and large AP50 equal pycocotools' on random images: ties in score,
    predictions near true boxes of both sizes, images with no box, and images with none
    predicted."""
    pytest.importorskip("pycocotools")
    rng = np.random.default_rng(seed)
    images = [random_image(rng, int(rng.integers(0, 6)), int(rng.integers(0, 12)))
              for _ in range(40)]
    expected, found = coco_ap50(images), ours_ap50(images)
    assert None not in expected
    assert found == pytest.approx(expected, abs=1e-12)


def test_matching_prefers_the_best_overlap_and_a_box_of_the_scored_size():
    """Two predictions on one small true box: the higher score takes it, the other is
    unmatched; a large true box is ignored when small ones are scored, and so is the
    prediction that matched it; an unmatched prediction of the other size is ignored too."""
    truth = np.array([[0, 0, 10, 10], [30, 30, 20, 20]], float)
    predicted = np.array([[1, 1, 10, 10], [0, 0, 10, 11], [30, 30, 20, 20], [50, 0, 30, 30]],
                         float)
    overall = boxes.match_image(predicted, truth, boxes.SIZE_RANGES["all"], 0.5)
    small = boxes.match_image(predicted, truth, boxes.SIZE_RANGES["small"], 0.5)
    assert overall.tolist() == [boxes.MATCHED, boxes.UNMATCHED, boxes.MATCHED, boxes.UNMATCHED]
    assert small.tolist() == [boxes.MATCHED, boxes.UNMATCHED, boxes.IGNORED, boxes.IGNORED]


def test_an_overlap_of_exactly_the_threshold_matches_and_equal_overlaps_take_the_last():
    """IoU 0.5 exactly (a box twice as wide) is a match at 0.5, as in COCO; of two true boxes
    the prediction overlaps equally, it takes the later, so the earlier is left for the next
    prediction (pycocotools breaks ties so)."""
    half = boxes.match_image(np.array([[0, 0, 20, 10]], float), np.array([[0, 0, 10, 10]], float),
                             boxes.SIZE_RANGES["all"], 0.5)
    assert half.tolist() == [boxes.MATCHED]
    truth = np.array([[0, 0, 10, 10], [10, 0, 10, 10]], float)
    between = np.array([[5, 0, 10, 10], [-4, 0, 10, 10]], float)  # IoU 1/3 with each; then 0.43
    assert boxes.match_image(between, truth, boxes.SIZE_RANGES["all"], 0.3).tolist() == [
        boxes.MATCHED, boxes.MATCHED]
    assert boxes.match_image(between[::-1], truth, boxes.SIZE_RANGES["all"], 0.3).tolist() == [
        boxes.MATCHED, boxes.MATCHED]


def test_precision_recall_and_f1_count_the_predictions_kept_at_the_threshold():
    scores = np.array([0.9, 0.8, 0.4, 0.2])
    outcomes = np.array([boxes.MATCHED, boxes.UNMATCHED, boxes.MATCHED, boxes.IGNORED])
    found = boxes.score(scores, outcomes, truths=4, score_threshold=0.5)
    assert (found.precision, found.recall, found.predictions) == (0.5, 0.25, 2)
    assert found.f1 == pytest.approx(2 * 0.5 * 0.25 / 0.75)
    none_kept = boxes.score(scores, outcomes, truths=4, score_threshold=0.95)
    assert (none_kept.precision, none_kept.recall, none_kept.f1) == (0.0, 0.0, 0.0)
    assert boxes.score(scores[:0], outcomes[:0], truths=0, score_threshold=0.5).ap50 is None


def test_labels_carry_every_box_back_and_decoding_finds_them():
    """Boxes packed in the labels come back exactly; outputs made from the labels' own maps
    (the heat as a logit of the target, size and offset as given) decode to the true boxes,
    best first."""
    truth = np.array([[3, 5, 6, 7], [20, 30, 24, 28], [40, 2, 9, 9]], float)
    labels = detection.encode_image(truth, index=17, image_side=64)
    index, unpacked = detection.unpack(labels)
    assert index == 17 and np.array_equal(unpacked, truth)
    heat = np.clip(labels[detection.HEAT].astype(np.float64), 1e-6, 1 - 1e-6)
    outputs = np.concatenate([np.log(heat / (1 - heat))[None], labels[1:5]])[None]
    decoded = detection.decode(outputs, top_k=detection.TOP_K)[0]
    found = decoded[decoded[:, 4] > 0.99, :4]
    assert sorted(map(tuple, found)) == sorted(map(tuple, truth))
    assert np.all(np.diff(decoded[:, 4]) <= 0) and np.all(decoded[3:, 4] < 0.01)


def test_only_peaks_are_predictions():
    """A heat map with one maximum (falling away from cell (row 5, column 9)) gives one
    prediction: that cell's box; every other slot is empty, with no box."""
    rows, columns = np.mgrid[0:16, 0:16]
    outputs = np.zeros((1, detection.OUTPUT_CHANNELS, 16, 16))
    outputs[0, 0] = 3.0 - np.hypot(rows - 5, columns - 9)
    outputs[0, 1:3] = 2.0  # 8 px wide and high
    outputs[0, 3:5] = 0.5
    decoded = detection.decode(outputs)[0]
    assert decoded[0].tolist() == pytest.approx([34.0, 18.0, 8.0, 8.0, detection.sigmoid(3.0)])
    assert np.all(decoded[1:, 4] == detection.NO_PREDICTION)
    assert np.all(decoded[1:, :4] == 0)


def test_too_many_boxes_for_the_packed_channel_is_refused():
    too_many = np.tile([[0, 0, 4, 4]], (detection.max_boxes(16) + 1, 1))
    with pytest.raises(ValueError, match="at most 63"):
        detection.encode_image(too_many, index=0, image_side=64)
