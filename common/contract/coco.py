"""Detection data in the COCO layout: what ``--dataset coco --data-dir DIR`` reads and what
``parbench data export faces DIR`` writes, so the data can be looked at and scored with any
COCO tool.

The layout, one folder per split (``train`` and ``val`` needed, ``shifted`` optional):
``DIR/<split>/instances.json`` (COCO's ``images``, ``annotations`` with ``bbox`` as x, y,
width, height in pixels, ``categories``) and the images under ``DIR/<split>/images/``, named by
each image's ``file_name``. Images are decoded with Pillow as RGB and resized to 64x64, their
boxes scaled with them; every annotation is a face (one class).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from parbench.base.files import write_atomic

from .data import Dataset, DatasetError
from .detection import detection_dataset
from .faces import IMAGE_SIZE

SPLITS = ("train", "val", "shifted")
Frame = tuple[int, int, int]  # an image's id, width and height in its instances.json
CATEGORY = {"id": 1, "name": "face"}


def _instances(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise DatasetError(f"{path}: no such file (the COCO layout wants "
                           "DIR/<split>/instances.json)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DatasetError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(data, dict) or not all(isinstance(data.get(key), list)
                                             for key in ("images", "annotations")):
        raise DatasetError(f"{path}: a COCO instances file needs 'images' and 'annotations' "
                           "lists")
    return data


def _boxes(data: dict, path: Path, sizes: dict[int, tuple[int, int]]) -> dict[int, list]:
    """Each image's boxes, checked: a known image, a positive size, inside the image."""
    found: dict[int, list] = {image_id: [] for image_id in sizes}
    for note in data["annotations"]:
        image_id, box = note.get("image_id"), note.get("bbox")
        if image_id not in sizes:
            raise DatasetError(f"{path}: annotation {note.get('id')} names image {image_id}, "
                               "which 'images' lacks")
        if not (isinstance(box, list) and len(box) == 4
                and all(isinstance(v, int | float) and np.isfinite(v) for v in box)):
            raise DatasetError(f"{path}: annotation {note.get('id')}: bbox must be 4 finite "
                               f"numbers, got {box!r}")
        x, y, w, h = box
        width, height = sizes[image_id]
        if w <= 0 or h <= 0:
            raise DatasetError(f"{path}: annotation {note.get('id')}: box {box} has no area")
        if x < 0 or y < 0 or x + w > width or y + h > height:
            raise DatasetError(f"{path}: annotation {note.get('id')}: box {box} lies outside "
                               f"its {width}x{height} image")
        found[image_id].append(box)
    return found


def read_split(folder: Path) -> tuple[np.ndarray, list[np.ndarray], list[Frame]]:
    """A split's images (uint8 [n, 64, 64, 3]), boxes (scaled to 64x64) and frames (each
    image's id, width and height in its file, which predictions are scaled back to), in image
    order."""
    from PIL import Image, UnidentifiedImageError

    path = folder / "instances.json"
    data = _instances(path)
    sizes = {image["id"]: (image["width"], image["height"]) for image in data["images"]}
    boxes = _boxes(data, path, sizes)
    images, scaled, frames = [], [], []
    for image in data["images"]:
        file = folder / "images" / image["file_name"]
        try:
            with Image.open(file) as opened:
                pixels = opened.convert("RGB")
        except (FileNotFoundError, UnidentifiedImageError, OSError) as err:
            raise DatasetError(f"{file}: cannot read the image ({err})") from None
        if pixels.size != sizes[image["id"]]:
            raise DatasetError(f"{file}: {pixels.size[0]}x{pixels.size[1]}, instances.json "
                               f"says {sizes[image['id']][0]}x{sizes[image['id']][1]}")
        scale = np.array([IMAGE_SIZE / pixels.size[0], IMAGE_SIZE / pixels.size[1]] * 2)
        images.append(np.asarray(pixels.resize((IMAGE_SIZE, IMAGE_SIZE),
                                               Image.Resampling.BILINEAR)))
        scaled.append(np.asarray(boxes[image["id"]], np.float64).reshape(-1, 4) * scale)
        frames.append((image["id"], *pixels.size))
    if not images:
        raise DatasetError(f"{path}: no images")
    return np.stack(images), scaled, frames


def write_split(folder: Path, images: np.ndarray, boxes: list) -> None:
    """A split in the COCO layout: its images as PNG files, then instances.json (written last
    and atomically: a folder with an instances.json is whole)."""
    from PIL import Image

    (folder / "images").mkdir(parents=True, exist_ok=True)
    records, notes = [], []
    for index, (pixels, image_boxes) in enumerate(zip(images, boxes)):
        name = f"{index:06d}.png"
        Image.fromarray(pixels).save(folder / "images" / name)
        records.append({"id": index, "file_name": name, "width": int(pixels.shape[1]),
                        "height": int(pixels.shape[0])})
        for box in image_boxes:  # ids from 1: COCO tools read an id of 0 as "no match"
            notes.append({"id": len(notes) + 1, "image_id": index,
                          "category_id": CATEGORY["id"], "bbox": [float(v) for v in box],
                          "area": float(box[2] * box[3]), "iscrowd": 0})
    write_atomic(folder / "instances.json", json.dumps(
        {"info": {"description": "parbench detection data"}, "images": records,
         "annotations": notes, "categories": [CATEGORY]}).encode())


def load_coco(data_dir: Path | None) -> Dataset:
    """--dataset coco: the splits under ``data_dir``."""
    if data_dir is None:
        raise DatasetError("--dataset coco needs --data-dir DIR holding train/ and val/ "
                           "(and optionally shifted/) in the COCO layout")
    splits = {split: read_split(Path(data_dir) / split) for split in SPLITS
              if split != "shifted" or (Path(data_dir) / split).is_dir()}
    return detection_dataset("coco", splits)
