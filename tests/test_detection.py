"""The detection task end to end: its bad inputs, its data (the faces, the COCO layout it reads
and exports), its evaluation gathered across ranks, and a trained run's record.

The scoring itself is tests/test_detection_metrics.py's (against pycocotools); the frameworks'
agreement on the detector is parity's (``parbench parity --model centernet``, tests/test_contract.py
and the FAMILIES there)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest

from conftest import needs, parbench, records_in, run_ok, shared_result
from parbench.base.errors import UsageError
from parbench.cli.main import build_parser
from parbench.cli.run_command import config_from_args
from parbench.contract import coco, detection
from parbench.contract.data import DatasetError
from parbench.contract.detection_task import FIGURE_KEYS, ObjectDetection
from parbench.contract.faces import draw_split, load_faces
from parbench.launch.config import resolve
from parbench.results.records import SCHEMA_VERSION


def resolved(*argv: str):
    args = build_parser().parse_args(["run", "torch-single", *argv])
    return resolve(config_from_args(args), train_size=2048)


@pytest.mark.parametrize("argv,line", [
    (["--model", "centernet", "--score-threshold", "0"],
     "--score-threshold must be in (0, 1), got 0.0"),
    (["--model", "centernet", "--iou-threshold", "1"],
     "--iou-threshold must be in (0, 1), got 1.0"),
    (["--model", "centernet", "--iou-threshold", "nan"],
     "--iou-threshold must be a finite number, got nan"),
    (["--model", "resnet", "--score-threshold", "0.5"],
     "--score-threshold is an option of the detection datasets (faces, coco), not of --dataset "
     "synthetic"),
    (["--model", "centernet", "--dataset", "synthetic"],
     "--model centernet is a model of object-detection; --dataset synthetic is not "
     "object-detection data (its datasets: faces, coco)"),
    (["--model", "resnet", "--dataset", "faces"],
     "--model resnet is a model of image-classification; --dataset faces is not "
     "image-classification data (its datasets: synthetic, synthetic-hard, random-images, digits, "
     "cifar10, mnist)"),
    (["--model", "centernet", "--dataset", "coco"], "--dataset coco needs --data-dir"),
])
def test_bad_detection_input_is_one_line(argv, line):
    with pytest.raises(UsageError) as refused:
        resolved(*argv)
    assert str(refused.value) == line


def small_coco(folder: Path) -> Path:
    """train and val splits of 4 drawn images each, in the COCO layout."""
    for split in ("train", "val"):
        images, boxes = draw_split(split, 4)
        coco.write_split(folder / split, images, boxes)
    return folder


def test_the_coco_layout_reads_back_what_was_written(tmp_path):
    """Pixels and boxes come back exactly (PNG is lossless, 64x64 needs no resizing), and the
    labels made from them are the drawn split's."""
    images, boxes = draw_split("val", 4)
    coco.write_split(tmp_path / "val", images, boxes)
    read_images, read_boxes, frames = coco.read_split(tmp_path / "val")
    assert frames == [(index, 64, 64) for index in range(4)]
    assert np.array_equal(read_images, images)
    assert [b.tolist() for b in read_boxes] == [np.reshape(b, (-1, 4)).tolist() for b in boxes]
    notes = json.loads((tmp_path / "val" / "instances.json").read_text())
    ids = [note["id"] for note in notes["annotations"]]
    assert sorted(ids) == list(range(1, sum(map(len, boxes)) + 1))  # one each, none 0


def test_a_bigger_image_is_resized_with_its_boxes(tmp_path):
    """A 128x96 image becomes 64x64; its box scales with it, x by 1/2 and y by 2/3."""
    from PIL import Image

    folder = tmp_path / "val"
    (folder / "images").mkdir(parents=True)
    Image.new("RGB", (128, 96), (200, 100, 50)).save(folder / "images" / "a.png")
    (folder / "instances.json").write_text(json.dumps({
        "images": [{"id": 7, "file_name": "a.png", "width": 128, "height": 96}],
        "annotations": [{"id": 1, "image_id": 7, "bbox": [20, 30, 40, 24]}]}))
    images, boxes, frames = coco.read_split(folder)
    assert frames == [(7, 128, 96)]
    assert images.shape == (1, 64, 64, 3) and images[0, 0, 0].tolist() == [200, 100, 50]
    assert boxes[0].tolist() == [[10.0, 20.0, 20.0, 16.0]]


@pytest.mark.parametrize("damage,message", [
    (lambda notes, folder: (folder / "instances.json").write_text("{not json"),
     "instances.json: not valid JSON"),
    (lambda notes, folder: (folder / "images" / "000001.png").unlink(),
     "000001.png: cannot read the image"),
    (lambda notes, folder: notes["annotations"][0].update(bbox=[60, 10, 10, 10]),
     "lies outside its 64x64 image"),
    (lambda notes, folder: notes["annotations"][0].update(bbox=[10, 10, -3, 10]),
     "has no area"),
    (lambda notes, folder: notes["annotations"][0].update(bbox=[10, 10, "wide", 10]),
     "bbox must be 4 finite numbers"),
    (lambda notes, folder: notes["annotations"][0].update(image_id=99),
     "names image 99, which 'images' lacks"),
])
def test_a_damaged_coco_folder_is_refused_naming_the_file(tmp_path, damage, message):
    folder = small_coco(tmp_path) / "val"
    path = folder / "instances.json"
    notes = json.loads(path.read_text())
    damage(notes, folder)
    if path.read_text().startswith("{\""):
        path.write_text(json.dumps(notes))
    with pytest.raises(DatasetError, match=message.replace("(", r"\(").replace(")", r"\)")):
        coco.read_split(folder)


def test_a_run_on_a_damaged_coco_folder_is_one_line_and_writes_nothing(tmp_path):
    folder = small_coco(tmp_path / "data")
    (folder / "val" / "instances.json").write_text("[]")
    done = parbench("run", "torch-single", "--model", "centernet", "--dataset", "coco",
                    "--data-dir", str(folder), "--steps", "1", "--out", str(tmp_path / "out"))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"parbench: error: {folder / 'val' / 'instances.json'}: a COCO instances file needs "
        "'images' and 'annotations' lists"]
    assert not (tmp_path / "out").exists()


def test_ranks_gather_every_images_predictions_into_one_evaluation():
    """The test set scored in three uneven chunks (as ranks and chunks split it) sums to the
    figures of one pass over it, and perfect outputs (made from the labels' own maps) score 1
    everywhere, on both splits."""
    data = load_faces()
    task = ObjectDetection.from_data(data)
    labels = np.asarray(data.y_test)
    heat = np.clip(labels[:, detection.HEAT].astype(np.float64), 1e-6, 1 - 1e-6)
    perfect = np.concatenate([np.log(heat / (1 - heat))[:, None], labels[:, 1:5]], axis=1)
    noisy = perfect + np.random.default_rng(0).normal(0, 1.0, perfect.shape)
    whole = task.eval_scores(task.eval_counts(labels, noisy, 6.0))
    parts = sum(task.eval_counts(labels[part], noisy[part], 2.0)
                for part in (slice(0, 100), slice(100, 377), slice(377, None)))
    assert task.eval_scores(parts) == whole
    assert 0 < whole["f1_all"] < 1 and 0 < whole["recall_small_shifted"] < 1
    best = task.eval_scores(task.eval_counts(labels, perfect, 0.0))
    assert all(best[key] == 1.0 for key in FIGURE_KEYS)
    assert best["count"] == len(labels) == data.holds["val_images"] * 2


def detector_run(tmp_path_factory) -> tuple[dict, dict[str, list]]:
    """torch-single, 24 AdamW steps of 64 faces images: the record every check below reads,
    and its predictions file of each split (--save-predictions)."""
    def train() -> tuple[dict, dict[str, list]]:
        folder = tmp_path_factory.mktemp("detector")
        record = run_ok(folder, "torch-single", "--model", "centernet", "--steps", "24",
                        "--global-batch", "64", "--eval-every", "12", "--save-predictions",
                        str(folder / "predictions.json"))
        return record, {split: json.loads((folder / name).read_text()) for split, name in
                        (("val", "predictions.json"), ("shifted", "predictions-shifted.json"))}
    return shared_result(tmp_path_factory, ("detector", "torch-single", 24), train)


@pytest.mark.slow
@needs("torch")
def test_a_detector_run_records_every_figure_and_learns(tmp_path_factory):
    """Every figure per size and split, in [0, 1], in the record of schema 13; the model learns
    in 24 steps (the heat map's prior alone finds nothing above the threshold: every cell
    scores 0.1, below 0.3), large faces first."""
    record, _ = detector_run(tmp_path_factory)
    metrics = record["metrics"]
    assert record["task"] == "object-detection" and record["schema_version"] == SCHEMA_VERSION
    assert all(0 <= metrics[key] <= 1 for key in FIGURE_KEYS)
    assert metrics["final_accuracy"] == metrics["f1_all"]
    assert metrics["recall_large"] > 0.3 and metrics["recall_large"] > metrics["recall_small"]
    curve = metrics["accuracy_curve"]
    assert [e["step"] for e in curve] == [12, 24] and "recall_large" in curve[0]
    assert metrics["loss_curve"][-1] < metrics["loss_curve"][0]


@pytest.mark.slow
@needs("torch")
def test_the_csv_keeps_the_compute_precision_apart_from_the_detection_figures(
        tmp_path_factory, tmp_path):
    """The tidy CSV's ``precision`` is the run's compute precision; the detection figures are
    ``precision_all`` and the like (a figure named ``precision`` overwrote it once)."""
    record, _ = detector_run(tmp_path_factory)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "record.json").write_text(json.dumps(record))
    done = parbench("report", str(tmp_path / "runs"), "--format", "csv")
    assert done.returncode == 0, done.stderr
    (row,) = list(csv.DictReader(io.StringIO(done.stdout)))
    assert row["precision"] == "fp32"
    assert float(row["precision_all"]) == pytest.approx(record["metrics"]["precision_all"])


@pytest.mark.slow
def test_data_export_writes_the_faces_that_coco_reads_back(tmp_path):
    """'parbench data export faces DIR' writes every split; --dataset coco on DIR is the faces
    dataset to the bit; a second export into the same folder is refused."""
    done = parbench("data", "export", "faces", str(tmp_path / "faces"))
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "faces").iterdir()) == ["shifted", "train", "val"]
    exported, drawn = coco.load_coco(tmp_path / "faces"), load_faces()
    for key in ("x_train", "y_train", "x_test", "y_test"):
        assert np.array_equal(getattr(exported, key), getattr(drawn, key)), key
    again = parbench("data", "export", "faces", str(tmp_path / "faces"))
    assert again.returncode == 2 and "exists and is not an empty folder" in again.stderr
    assert records_in(tmp_path) == []


@pytest.mark.slow
@needs("torch")
def test_pycocotools_scores_the_saved_predictions_as_the_record_does(tmp_path_factory, tmp_path):
    """The predictions file of each split, scored by pycocotools against that split in the
    COCO layout ('data export' writes the same), gives the record's overall AP50."""
    pytest.importorskip("pycocotools")
    from test_detection_metrics import coco_evaluation

    record, predictions = detector_run(tmp_path_factory)
    for split, suffix in (("val", ""), ("shifted", "_shifted")):
        images, boxes = draw_split(split)
        coco.write_split(tmp_path / split, images, boxes)
        assert {p["image_id"] for p in predictions[split]} <= set(range(len(images)))
        found = coco_evaluation(tmp_path / split / "instances.json", predictions[split])
        assert found == pytest.approx(record["metrics"][f"ap50_all{suffix}"], abs=1e-12)


def test_save_predictions_is_refused_where_there_are_none(tmp_path):
    done = parbench("run", "torch-single", "--model", "mlp", "--steps", "1", "--out",
                    str(tmp_path / "out"), "--save-predictions", str(tmp_path / "p.json"))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "parbench: error: --save-predictions: image-classification writes no predictions (a "
        "detection model does)"]
    refused = parbench("compare", "torch-single", "--save-predictions", str(tmp_path / "p.json"),
                       "--out", str(tmp_path / "out"))
    assert refused.returncode == 2 and "--save-predictions is for 'parbench run'" in refused.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "p.json").exists()
