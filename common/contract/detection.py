"""What a CenterNet-style detector learns from and what it predicts, in numpy, once for every
framework (Zhou et al. 2019, "Objects as Points").

Labels: one float32 array per image, [LABEL_CHANNELS, H/4, W/4], at the model's output
resolution (stride 4):

* 0 ``heat``: for every face a Gaussian peak at its centre cell, exactly 1 there (the maximum
  where two overlap); its sigma, in cells, is a sixth of the box's mean side over the stride.
  CenterNet derives sigma from the radius within which a shifted box still overlaps the truth
  at IoU 0.7; this simpler rule gives the same order (a near one-hot for a 4 px face, about 1
  cell for a 24 px one) and is stated here instead of ported.
* 1, 2 ``size``: the box's width and height in cells, at its centre cell (0 elsewhere);
* 3, 4 ``offset``: where in its centre cell the centre lies, x then y, in [0, 1);
* 5 ``mask``: 1 at each face's centre cell, 0 elsewhere;
* 6 ``packed``: the image's own facts, flattened: its index in its split (so the predictions
  of every rank land in their image's place), its face count, then each face's box (x, y,
  width, height in pixels). Faces are whole boxes here, not only what the maps can say: two
  faces whose centres fall in one cell keep their two boxes for scoring.

Model output, [5, H/4, W/4]: the heat logit, the size (2), the offset (2) (OUTPUT_CHANNELS).
Decoding: sigmoid of the heat, peaks that equal their 3x3 neighbourhood's maximum, the top-K
peaks by score, each a box from its cell, offset and size.
"""

from __future__ import annotations

import numpy as np

from .data import Dataset, standardise

STRIDE = 4
LABEL_CHANNELS = 7
HEAT, SIZE_W, SIZE_H, OFFSET_X, OFFSET_Y, MASK, PACKED = range(LABEL_CHANNELS)
OUTPUT_CHANNELS = 5  # heat logit, width, height, offset x, offset y
TOP_K = 20  # predictions kept per image: every rank gathers this many per image
NO_PREDICTION = -1.0  # the score of an empty slot of the top K (fewer peaks than K)
# the loss (parbench.contract.detection_task): CenterNet's focal exponents and size weight
FOCAL_ALPHA, FOCAL_BETA, SIZE_WEIGHT = 2, 4, 0.1
GAUSSIAN_SIDES = 6.0  # sigma = mean side / stride / GAUSSIAN_SIDES
GAUSSIAN_REACH = 3.0  # the peak is cut to 0 beyond this many sigmas


def max_boxes(output_side: int) -> int:
    """How many boxes the packed channel holds: two slots for the index and the count."""
    return (output_side * output_side - 2) // 4


def encode_image(boxes: np.ndarray, index: int, image_side: int) -> np.ndarray:
    """The labels of one image of ``image_side`` pixels from its boxes ([n, 4], x y w h in
    pixels); ValueError when there are more boxes than the packed channel holds."""
    side = image_side // STRIDE
    labels = np.zeros((LABEL_CHANNELS, side, side), np.float64)
    boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
    if len(boxes) > max_boxes(side):
        raise ValueError(f"image {index} has {len(boxes)} boxes; at {image_side}x{image_side} "
                         f"an image holds at most {max_boxes(side)}")
    cells = np.arange(side)
    for x, y, w, h in boxes:
        centre = np.array([x + w / 2, y + h / 2]) / STRIDE
        cell = np.minimum(np.floor(centre).astype(int), side - 1)
        sigma = (w + h) / 2 / STRIDE / GAUSSIAN_SIDES
        distance2 = (cells[None, :] - cell[0]) ** 2 + (cells[:, None] - cell[1]) ** 2
        peak = np.exp(-distance2 / (2 * sigma ** 2))
        peak[distance2 > (GAUSSIAN_REACH * sigma) ** 2] = 0.0
        labels[HEAT] = np.maximum(labels[HEAT], peak)
        column, row = cell
        labels[HEAT, row, column] = 1.0
        labels[[SIZE_W, SIZE_H], row, column] = w / STRIDE, h / STRIDE
        labels[[OFFSET_X, OFFSET_Y], row, column] = centre - cell
        labels[MASK, row, column] = 1.0
    packed = np.concatenate([[index, len(boxes)], boxes.ravel()])
    labels[PACKED].ravel()[:len(packed)] = packed
    return labels.astype(np.float32)


def encode(boxes_per_image: list[np.ndarray], image_side: int) -> np.ndarray:
    """The labels of a split, [n, LABEL_CHANNELS, side, side], each image indexed by its place."""
    return np.stack([encode_image(boxes, index, image_side)
                     for index, boxes in enumerate(boxes_per_image)])


def unpack(labels: np.ndarray) -> tuple[int, np.ndarray]:
    """(the image's index in its split, its boxes [n, 4]) from one image's labels."""
    packed = np.asarray(labels[PACKED], np.float64).ravel()
    count = int(packed[1])
    return int(packed[0]), packed[2:2 + 4 * count].reshape(count, 4)


def sigmoid(logits: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(logits, np.float64)))  # no overflow


def peaks(heat: np.ndarray) -> np.ndarray:
    """Which cells of [rows, side, side] scores equal their 3x3 neighbourhood's maximum (the
    border padded with -inf): CenterNet's max-pool suppression, in place of NMS."""
    padded = np.pad(heat, ((0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    side = heat.shape[-1]
    neighbourhood = np.max([padded[:, dy:dy + side, dx:dx + side]
                            for dy in range(3) for dx in range(3)], axis=0)
    return heat == neighbourhood


def decode(outputs: np.ndarray, top_k: int = TOP_K) -> np.ndarray:
    """The top-K predictions of each image from the model's outputs [rows, 5, side, side]:
    [rows, top_k, 5] of (x, y, width, height in pixels, score), best first; slots beyond the
    image's peaks hold score NO_PREDICTION. Ties keep the cell order (row-major)."""
    outputs = np.asarray(outputs, np.float64)
    rows, _, side, _ = outputs.shape
    heat = sigmoid(outputs[:, 0])
    scores = np.where(peaks(heat), heat, NO_PREDICTION).reshape(rows, -1)
    order = np.argsort(-scores, axis=1, kind="stable")[:, :top_k]
    best = np.take_along_axis(scores, order, axis=1)
    row, column = np.divmod(order, side)
    maps = outputs[:, 1:].reshape(rows, 4, -1)
    width, height, offset_x, offset_y = (np.take_along_axis(maps[:, c], order, axis=1)
                                         for c in range(4))
    width, height = width * STRIDE, height * STRIDE
    centre_x, centre_y = (column + offset_x) * STRIDE, (row + offset_y) * STRIDE
    boxes = np.stack([centre_x - width / 2, centre_y - height / 2, width, height, best], -1)
    boxes[best == NO_PREDICTION, :4] = 0.0
    return boxes


def detection_dataset(name: str, splits: dict[str, tuple[np.ndarray, list, list]]) -> Dataset:
    """A detection Dataset from its splits' uint8 HWC images, boxes and frames (each image's
    id, width and height in its source): ``train``, ``val`` and optionally ``shifted``. The
    test rows are ``val`` then ``shifted``, indexed in that order; images standardised per
    channel with the training split's statistics, as every image dataset here."""
    train_images, train_boxes, _ = splits["train"]
    tests = [splits[split] for split in ("val", "shifted") if split in splits]
    test_images = np.concatenate([images for images, _, _ in tests])
    test_boxes = [boxes for _, boxes, _ in tests for boxes in boxes]
    side = train_images.shape[1]
    x_train, x_test = standardise(train_images.transpose(0, 3, 1, 2).astype(np.float32),
                                  test_images.transpose(0, 3, 1, 2).astype(np.float32))
    return Dataset(name, x_train, encode(train_boxes, side), x_test, encode(test_boxes, side),
                   {"classes": 1, "val_images": len(tests[0][0]),
                    "shifted_images": len(tests[1][0]) if len(tests) > 1 else 0,
                    "test_frames": tuple(tuple(frame) for _, _, frames in tests
                                         for frame in frames)})
