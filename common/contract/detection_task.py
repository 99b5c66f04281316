"""Object detection, the task of the face-detector study: did N devices change precision,
recall and F1, overall and per object size, in-domain and on a shifted style?

Inputs: NCHW float32 images; labels: the CenterNet maps and each image's boxes
(parbench.contract.detection); a model's output: the heat-map logit, size and offset maps. The
loss, as every framework computes it, per image, then the mean over the images:

* the penalty-reduced focal loss of CenterNet on the heat map, summed over the cells: at a face's
  centre ``-(1 - p)^2 log p``, elsewhere ``-(1 - y)^4 p^2 log(1 - p)`` (p: the sigmoid of the
  logit, y: the target heat), the logs taken as log-sigmoids so no clamp is needed;
* plus, at each centre cell, ``0.1 x`` the L1 distance of the size and the L1 distance of the
  offset (CenterNet's weights);
* divided by the count of face centres on the image's map (at least 1).

CenterNet divides the batch's sum by the batch's face count instead; that mean differs
between one device's batch and N devices' shards of it, so no data-parallel run would compute
one device's step. Per image, N ranks' mean of means is the global one.

Evaluation: each rank decodes its images' top-K predictions (parbench.contract.detection) and
scores them against the boxes (parbench.contract.boxes); the predictions with their outcomes
go into their image's place of one vector, which ranks sum, so every rank ends with every
image's predictions, from which the scores are computed once. The test rows are the in-domain
validation split, then the shifted one (``shifted`` in the figures' names), when the dataset
has one. The record's ``accuracy`` (every task's evaluations carry one) is the in-domain F1 at
the score threshold.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from parbench.base.options import ACCURACY, POSITIVE, Bounds, Option

from . import boxes as scoring
from .coco import load_coco
from .data import Dataset
from .detection import NO_PREDICTION, TOP_K, decode, unpack
from .faces import IMAGE_SIZE, load_faces
from .task import Quality, Target, Task

DETECTION_MODELS = ("centernet", "centernet-nonorm")
SPLITS = {"val": "", "shifted": "_shifted"}  # a figure's name: its metric, size, split
SIZES = {"all": "_all", "small": "_small", "large": "_large"}
FIGURES = ("f1", "precision", "recall", "ap50")
PREDICTION_FIELDS = 5 + len(SIZES)  # x, y, w, h, score, then the outcome per size range
THRESHOLD = Bounds(0, 1, low_open=True, high_open=True)


def figure_key(metric: str, size: str, split: str) -> str:
    """The evaluation's key of one figure: ``recall_small_shifted``, ``f1_all`` (overall,
    in-domain). The size is always named: a bare ``precision`` would read as the compute
    precision (fp32, bf16) beside it in the CSV."""
    return f"{metric}{SIZES[size]}{SPLITS[split]}"


FIGURE_KEYS = tuple(figure_key(metric, size, split) for split in SPLITS for size in SIZES
                    for metric in FIGURES)


def _quality() -> tuple[Quality, ...]:
    """Every figure by split and size ("F1 small shifted"); in the grid of changes a row per
    figure and split ("F1 shifted"), a column per size."""
    labels = {"precision": "P", "recall": "R", "f1": "F1", "ap50": "AP50"}
    qualities = []
    for split in SPLITS:
        for size in SIZES:
            for metric in FIGURES:
                shifted = " shifted" if split == "shifted" else ""
                qualities.append(Quality(
                    f"{labels[metric]} {size}{shifted}", figure_key(metric, size, split),
                    "fraction", "higher", judged=metric != "ap50",
                    grid=(f"{labels[metric]}{shifted}", size)))
    return (*qualities, Quality("loss", "final_loss", "per image", "lower"))


@dataclass(frozen=True)
class ObjectDetection(Task):
    """Faces (one class) found in images; ``val_images`` and ``shifted_images`` test rows,
    scored at ``score_threshold`` and ``iou_threshold``; ``test_frames``: each test row's id,
    width and height in its source, for its predictions in COCO's results format."""

    val_images: int = 0
    shifted_images: int = 0
    score_threshold: float = 0.3
    iou_threshold: float = 0.5
    test_frames: tuple[tuple[int, int, int], ...] = ()
    name: ClassVar[str] = "object-detection"
    datasets: ClassVar[tuple[str, ...]] = ("faces", "coco")
    data_kind: ClassVar[str] = "detection datasets"
    dataset_notes: ClassVar[dict[str, str]] = {
        "faces": "synthetic faces at two sizes, with a shifted-style split",
        "coco": "COCO-style instances.json and images under --data-dir"}
    data_paths: ClassVar[dict[str, str]] = {"coco": "folder"}
    models: ClassVar[tuple[str, ...]] = DETECTION_MODELS
    options: ClassVar[tuple[Option, ...]] = (
        Option("score_threshold", float, help="detection: the score a prediction needs to "
               "count in precision, recall and F1 (0.3)", owner="task object-detection",
               bounds=THRESHOLD, inputs=True),
        Option("iou_threshold", float, help="detection: the overlap (IoU) a prediction needs to "
               "match a true box (0.5)", owner="task object-detection", bounds=THRESHOLD,
               inputs=True))
    inputs: ClassVar[str] = "images, NCHW float32"
    labels: ClassVar[str] = ("CenterNet maps and packed boxes, float32 [rows, 7, H/4, W/4] "
                             "(parbench.contract.detection)")
    loss: ClassVar[str] = ("CenterNet's focal loss on the heat map plus 0.1 x L1 size and L1 "
                           "offset at the centres, over the image's face centres, mean over images")
    unit: ClassVar[str] = "samples"
    per_device_throughput: ClassVar[bool] = False
    quality: ClassVar[tuple[Quality, ...]] = _quality()
    quality_note: ClassVar[str] = (
        "P, R, F1: precision, recall and F1 of the predictions scoring at least the score "
        "threshold, matched at IoU 0.5 (COCO's greedy matching); AP50: COCO's 101-point AP at "
        "IoU 0.5; small: boxes of at most 12x12 px, large: above (COCO's ranges scaled to "
        "64-pixel images); shifted: the validation split in another style.")
    record_fields: ClassVar[tuple[str, ...]] = FIGURE_KEYS
    record_since: ClassVar[int] = 13
    final_fields: ClassVar[tuple[str, ...]] = FIGURE_KEYS
    curve_fields: ClassVar[tuple[str, ...]] = ("f1_all", "precision_all", "recall_all",
                                               "ap50_all", "recall_small", "recall_large")
    probe_input: ClassVar[tuple[int, ...]] = (3, 16, 16)
    default_dataset: ClassVar[str] = "faces"
    default_optimizer: ClassVar[str] = "adamw"
    curve_metric: ClassVar[tuple[str, str]] = ("f1_all", "F1, in-domain")
    curve_by_items: ClassVar[bool] = False
    prediction_format: ClassVar[str | None] = "COCO results JSON, one file per split"
    targets: ClassVar[tuple[Target, ...]] = (
        Target("f1_all", "higher", ACCURACY, "F1, in-domain"),
        Target("recall_large", "higher", ACCURACY, "recall of large faces, in-domain"),
        Target("ap50_all", "higher", ACCURACY, "AP50, in-domain"),
        Target("loss", "lower", POSITIVE, "per validation image"))

    @classmethod
    def load(cls, dataset: str, data_dir: Path | None, options: dict) -> Dataset:
        data = load_faces() if dataset == "faces" else load_coco(data_dir)
        data.holds.update({key: options[key] for key in ("score_threshold", "iou_threshold")
                           if options.get(key) is not None})
        return data

    @classmethod
    def from_data(cls, dataset: Dataset) -> ObjectDetection:
        given = {key: dataset.holds[key] for key in ("score_threshold", "iou_threshold")
                 if key in dataset.holds}
        return cls(dataset.holds["classes"], dataset.holds["val_images"],
                   dataset.holds["shifted_images"], test_frames=dataset.holds["test_frames"],
                   **given)

    def probe_batch(self, rows: int, rng: np.random.Generator) -> np.ndarray:
        return rng.normal(0, 1, (rows, *self.probe_input)).astype(np.float32)

    @property
    def _test_images(self) -> int:
        return self.val_images + self.shifted_images

    def eval_counts(self, labels: np.ndarray, outputs: np.ndarray,
                    loss_sum: float) -> np.ndarray:
        """Every image's top-K predictions with their outcome per size range, in its place,
        then the true boxes per split and size, then rows and the loss sum."""
        predictions = np.zeros((self._test_images, TOP_K, PREDICTION_FIELDS))
        truths = np.zeros((len(SPLITS), len(SIZES)))
        if len(labels):
            for image_labels, found in zip(labels, decode(outputs, TOP_K)):
                index, truth = unpack(image_labels)
                kept = found[:, 4] != NO_PREDICTION
                predictions[index, :, :5] = found
                for column, size_range in enumerate(scoring.SIZE_RANGES.values()):
                    predictions[index, kept, 5 + column] = scoring.match_image(
                        found[kept, :4], truth, size_range, self.iou_threshold)
                    truths[int(index >= self.val_images), column] += scoring.counted_truths(
                        truth, size_range)
        return np.concatenate([predictions.ravel(), truths.ravel(), [len(labels), loss_sum]])

    def _gathered(self, totals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(every image's predictions [images, TOP_K, PREDICTION_FIELDS], the true boxes per
        split and size) from the summed counts."""
        predictions = totals[:-2 - truths_size()].reshape(self._test_images, TOP_K,
                                                           PREDICTION_FIELDS)
        return predictions, totals[-2 - truths_size():-2].reshape(len(SPLITS), len(SIZES))

    def predictions(self, totals: np.ndarray) -> dict[str, list[dict]]:
        """Each split's predictions in COCO's results format: image_id as its instances.json
        names it, category 1, the box (x, y, w, h) scaled back to the image's own size, the
        score; every kept prediction, best first per image (an AP over them is the record's)."""
        predictions, _ = self._gathered(totals)
        found: dict[str, list[dict]] = {split: [] for split in SPLITS}
        for row, (image_id, width, height) in enumerate(self.test_frames):
            split = "val" if row < self.val_images else "shifted"
            scale = np.array([width, height, width, height]) / IMAGE_SIZE
            found[split] += [{"image_id": image_id, "category_id": 1,
                              "bbox": [float(v) for v in box[:4] * scale],
                              "score": float(box[4])}
                             for box in predictions[row] if box[4] != NO_PREDICTION]
        return found if self.shifted_images else {"val": found["val"]}

    def eval_scores(self, totals: np.ndarray) -> dict:
        predictions, truths = self._gathered(totals)
        rows = int(round(totals[-2]))
        figures: dict = {}
        for s, (split, images) in enumerate(zip(SPLITS, (slice(0, self.val_images),
                                                         slice(self.val_images, None)))):
            found = predictions[images].reshape(-1, PREDICTION_FIELDS)
            found = found[found[:, 4] != NO_PREDICTION]
            for column, size in enumerate(SIZES):
                scored = scoring.score(found[:, 4], np.rint(found[:, 5 + column]),
                                       int(round(truths[s, column])), self.score_threshold)
                for metric in FIGURES:
                    missing = split == "shifted" and not self.shifted_images
                    figures[figure_key(metric, size, split)] = (
                        None if missing else getattr(scored, metric))
        return {"accuracy": figures["f1_all"], "loss": float(totals[-1]) / rows, "count": rows,
                **figures}


def truths_size() -> int:
    return len(SPLITS) * len(SIZES)
