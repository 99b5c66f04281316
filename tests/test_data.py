"""Datasets: the built-in set, the bundled one, and the official on-disk formats."""

from __future__ import annotations

import gzip
import pickle
import struct

import numpy as np
import pytest

from conftest import write_cifar
from parbench.contract.data import (
    DatasetError,
    load_cifar10,
    load_dataset,
    load_digits,
    load_mnist,
    load_synthetic,
    synthetic_images,
)


def write_idx(path, array, compress):
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I",
                                                                      *array.shape)
    raw = header + array.astype(np.uint8).tobytes()
    (gzip.open if compress else open)(path, "wb").write(raw)


def write_mnist(folder, compress, n=30):
    rng = np.random.default_rng(1)
    folder.mkdir(parents=True, exist_ok=True)
    suffix = ".gz" if compress else ""
    for prefix in ("train", "t10k"):
        write_idx(folder / f"{prefix}-images-idx3-ubyte{suffix}",
                  rng.integers(0, 256, (n, 28, 28)), compress)
        write_idx(folder / f"{prefix}-labels-idx1-ubyte{suffix}", rng.integers(0, 10, n),
                  compress)


def test_synthetic_is_deterministic_balanced_and_standardised():
    first, again = synthetic_images(500, seed=3), synthetic_images(500, seed=3)
    assert np.array_equal(first[0], again[0]) and np.array_equal(first[1], again[1])
    data = load_synthetic(1000, 200)
    assert data.x_train.shape == (1000, 3, 32, 32) and data.x_train.dtype == np.float32
    assert np.bincount(data.y_train, minlength=10).min() > 60
    assert abs(data.x_train.mean()) < 0.01 and abs(data.x_train.std() - 1) < 0.01
    assert data.fingerprint() == load_synthetic(1000, 200).fingerprint()


# The sha256 of the digits arrays (Dataset.fingerprint) that sklearn.datasets.load_digits gave
# the earlier loader (scikit-learn 1.9.1): the packaged file must give the same samples, split
# and standardisation, bit for bit, so records made before it stay comparable.
DIGITS_FINGERPRINT = "2afa72f73c6fa4b601f23ce87d426b0743a5c38c832dd9092a73391b8eee791f"


def test_digits_is_the_uci_set_that_scikit_learn_gave():
    data = load_digits()
    assert data.x_train.shape == (1440, 1, 8, 8) and data.x_test.shape == (357, 1, 8, 8)
    assert np.bincount(data.y_train, minlength=10).min() == 130  # 174 to 183 of each in 1797
    assert data.fingerprint() == DIGITS_FINGERPRINT


def test_cifar10_official_pickles(tmp_path):
    write_cifar(tmp_path / "cifar-10-batches-py")
    data = load_cifar10(tmp_path)  # the parent folder works as well as the batches folder
    assert data.x_train.shape == (100, 3, 32, 32) and data.x_test.shape == (20, 3, 32, 32)
    raw = pickle.load(open(tmp_path / "cifar-10-batches-py" / "data_batch_1", "rb"))
    assert np.array_equal(data.y_train[:20], raw[b"labels"])
    # Standardisation is monotonic per channel: brightest raw pixel stays brightest.
    first = raw[b"data"][0].reshape(3, 32, 32)[0]
    assert np.argmax(data.x_train[0, 0]) == np.argmax(first)


def test_corrupt_cifar_file_is_named(tmp_path):
    write_cifar(tmp_path / "cifar-10-batches-py")
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").write_bytes(b"\x80\x04garbage")
    with pytest.raises(DatasetError, match="data_batch_3"):
        load_dataset("cifar10", tmp_path)


def test_missing_cifar_file_is_named(tmp_path):
    write_cifar(tmp_path / "cifar-10-batches-py")
    (tmp_path / "cifar-10-batches-py" / "test_batch").unlink()
    with pytest.raises(DatasetError, match="missing.*test_batch"):
        load_dataset("cifar10", tmp_path)


@pytest.mark.parametrize("compress", [False, True])
def test_mnist_idx_files_plain_and_gzip(tmp_path, compress):
    write_mnist(tmp_path, compress)
    data = load_mnist(tmp_path)
    assert data.x_train.shape == (30, 1, 28, 28) and data.y_test.shape == (30,)


def test_corrupt_mnist_file_is_named(tmp_path):
    write_mnist(tmp_path, compress=False)
    (tmp_path / "t10k-labels-idx1-ubyte").write_bytes(b"\x00\x00\x09\x01")
    with pytest.raises(DatasetError, match="t10k-labels-idx1-ubyte"):
        load_mnist(tmp_path)


def test_missing_data_dir_and_unknown_name():
    with pytest.raises(DatasetError, match="does not exist"):
        load_dataset("mnist", "/nonexistent/mnist")
    with pytest.raises(DatasetError, match="unknown dataset"):
        load_dataset("imagenet")
