"""ChestX-ray14 (NIH): label readers, the patient split, synthetic images, image I/O and the
training and evaluation transforms.

Labels come from the NIH label file, `Data_Entry_2017_v2020.csv` (or the older
`Data_Entry_2017.csv`), plain or gzipped: the copy the torchxrayvision wheel ships, or the
user's NIH folder. A row is (image name, patient id, multi-hot uint8[14] over FINDINGS);
"No Finding" is all zeros.

Only the standard library and numpy are imported here: the framework environments import this
module too. PIL and cv2 are imported inside the functions that need them.
"""
import csv
import gzip
import io
import os
import random
import zipfile
import zlib
from collections import namedtuple
from pathlib import Path

import numpy as np

from dlbench.errors import DataError
from dlbench.record import peak_rss_bytes

# The 14 findings, in the order of the NIH paper and of every model's 14 outputs.
FINDINGS = ("Atelectasis", "Cardiomegaly", "Effusion", "Infiltration", "Mass", "Nodule", "Pneumonia",
            "Pneumothorax", "Consolidation", "Edema", "Emphysema", "Fibrosis", "Pleural_Thickening", "Hernia")
NO_FINDING = "No Finding"
_FINDING_INDEX = {name: i for i, name in enumerate(FINDINGS)}

WHEEL_MEMBER = "torchxrayvision/data/Data_Entry_2017_v2020.csv.gz"
# In a user's NIH folder, the first of these that exists is the label file.
NIH_LABEL_FILES = ("Data_Entry_2017_v2020.csv", "Data_Entry_2017_v2020.csv.gz",
                   "Data_Entry_2017.csv", "Data_Entry_2017.csv.gz")
IMAGE_COLUMN, FINDINGS_COLUMN, PATIENT_COLUMN = "Image Index", "Finding Labels", "Patient ID"

SPLITS = ("train", "valid", "test")
DEFAULT_FRACTIONS = (0.7, 0.1, 0.2)
# The prepared label file (prepare_chestxray.py labels): these columns, then the 14 findings.
LABEL_COLUMNS = ("image", "patient", "split")

ORIGINAL_SIZE = 1024       # NIH images are 1024x1024 8-bit grayscale PNGs
RESIZED_SIZE = 264         # resized once, before training (the DenseNet-121 study)
CROP_SIZE = 224            # random crop (training) or centre crop (evaluation)
# Synthetic mode keeps at most this many random images in memory and reuses them by index
# (index % pool): a float32 3x224x224 image is 602 KB, the full training split would be 47 GB.
SYNTHETIC_POOL = 256
JPEG_QUALITY = 90
PNG_COMPRESSION = 6        # zlib level of resized PNGs, the same for Pillow and OpenCV (Pillow's default)
SYNTHETIC_PNG_COMPRESSION = 1  # the synthetic 1024x1024 PNGs: 3x faster to write than 6, 15% larger
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
READERS = ("pillow", "opencv")  # the Python module that reads and writes the images
FORMATS = {"jpeg": ".jpg", "png": ".png"}  # format -> the suffix preprocessing writes
FORMAT_SUFFIXES = {"jpeg": (".jpg", ".jpeg"), "png": (".png",)}

LabelRow = namedtuple("LabelRow", "image patient labels")


# --- labels ------------------------------------------------------------------------------------

def parse_findings(text, name, line):
    """'Cardiomegaly|Emphysema' -> multi-hot uint8[14]; 'No Finding' -> zeros."""
    labels = np.zeros(len(FINDINGS), dtype=np.uint8)
    for finding in text.split("|"):
        finding = finding.strip()
        if finding == NO_FINDING:
            continue
        index = _FINDING_INDEX.get(finding)
        if index is None:
            raise DataError(f"{name}: line {line}: unknown finding {finding!r} (known: {', '.join(FINDINGS)}, "
                            f"{NO_FINDING})")
        labels[index] = 1
    return labels


def read_label_csv(lines, name):
    """NIH label rows (a header with Image Index, Finding Labels, Patient ID) -> [LabelRow]."""
    reader = csv.reader(lines)
    header = next(reader, None)
    if header is None:
        raise DataError(f"{name}: empty file")
    header = [column.strip() for column in header]
    missing = [c for c in (IMAGE_COLUMN, FINDINGS_COLUMN, PATIENT_COLUMN) if c not in header]
    if missing:
        raise DataError(f"{name}: header lacks the column(s) {missing} (has {header[:6]})")
    i_image, i_findings, i_patient = (header.index(c) for c in (IMAGE_COLUMN, FINDINGS_COLUMN, PATIENT_COLUMN))
    rows, seen = [], {}
    for line, row in enumerate(reader, start=2):
        if not row:
            continue
        if len(row) != len(header):  # a row cut short (or run together) would shift its fields
            raise DataError(f"{name}: line {line} has {len(row)} fields, the header {len(header)}")
        image, patient = row[i_image].strip(), row[i_patient].strip()
        if not image or not patient:
            raise DataError(f"{name}: line {line}: empty image name or patient id")
        if image in seen:
            raise DataError(f"{name}: line {line}: image {image} already listed on line {seen[image]}")
        seen[image] = line
        rows.append(LabelRow(image, patient, parse_findings(row[i_findings], name, line)))
    if not rows:
        raise DataError(f"{name}: no rows")
    return rows


def _decode_text(data, name):
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as err:
            raise DataError(f"{name}: corrupt gzip ({err})") from err
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise DataError(f"{name}: not UTF-8 text ({err})") from err


def read_label_file(path):
    """A Data_Entry_2017*.csv label file, plain or gzipped (told by its first bytes)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise DataError(f"{path}: cannot be read ({err})") from err
    return read_label_csv(io.StringIO(_decode_text(data, path), newline=""), str(path))


def read_wheel_labels(path):
    """The real NIH label file that the torchxrayvision wheel ships (a zip member)."""
    path = Path(path)
    try:
        with zipfile.ZipFile(path) as wheel:
            data = wheel.read(WHEEL_MEMBER)
    except (zipfile.BadZipFile, KeyError, EOFError, OSError) as err:
        raise DataError(f"{path}: not a readable torchxrayvision wheel ({err})") from err
    name = f"{path}:{WHEEL_MEMBER}"
    return read_label_csv(io.StringIO(_decode_text(data, name), newline=""), name)


def find_nih_label_file(folder):
    folder = Path(folder)
    for candidate in NIH_LABEL_FILES:
        if (folder / candidate).is_file():
            return folder / candidate
    raise DataError(f"{folder}: no NIH label file (looked for {', '.join(NIH_LABEL_FILES)})")


def read_nih_labels(folder):
    """The label file of a user's NIH ChestX-ray14 folder."""
    return read_label_file(find_nih_label_file(folder))


# --- splits and subsets ------------------------------------------------------------------------

def patient_split(rows, fractions=DEFAULT_FRACTIONS, seed=0):
    """{'train', 'valid', 'test'} -> rows, no patient in two splits, deterministic given the seed.

    The patients (sorted, then shuffled with the seed) are laid end to end by their image
    counts; a patient goes to the split in which the middle of their images falls, so the
    image fractions come out close to `fractions`. Rows keep the order of the label file.
    """
    fractions = tuple(float(f) for f in fractions)
    if len(fractions) != 3 or min(fractions) < 0 or abs(sum(fractions) - 1) > 1e-6:
        raise ValueError(f"fractions must be three non-negative numbers that sum to 1, got {fractions}")
    per_patient = {}
    for row in rows:
        per_patient[row.patient] = per_patient.get(row.patient, 0) + 1
    patients = sorted(per_patient)
    random.Random(seed).shuffle(patients)
    bounds = np.cumsum(fractions) * len(rows)
    assigned, before = {}, 0
    for patient in patients:
        middle = before + per_patient[patient] / 2
        assigned[patient] = SPLITS[min(int(np.searchsorted(bounds, middle, side="right")), 2)]
        before += per_patient[patient]
    split = {name: [] for name in SPLITS}
    for row in rows:
        split[assigned[row.patient]].append(row)
    return split


def choose_subset(rows_by_split, counts, seed):
    """The first N rows of each split in a seeded order ({'train': N, ...}; None = all of it).

    Each split's order comes from the seed and the split's name alone, so changing one count
    leaves the other splits as they were, and a smaller N gives a prefix of a larger one.
    """
    chosen = {}
    for index, name in enumerate(SPLITS):
        rows = rows_by_split.get(name, [])
        n = counts.get(name)
        if n is not None and n < 0:
            raise ValueError(f"the {name} count must be >= 0 or None, got {n}")
        order = np.random.default_rng([seed, index]).permutation(len(rows))
        chosen[name] = [rows[i] for i in (order if n is None else order[:n])]
    return chosen


def write_labels_csv(path, rows_by_split):
    """The prepared label file: image, patient, split, then 0/1 per finding."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([*LABEL_COLUMNS, *FINDINGS])
        for split in SPLITS:
            for row in rows_by_split.get(split, []):
                writer.writerow([row.image, row.patient, split, *(int(v) for v in row.labels)])
    tmp.replace(path)


def read_labels_csv(path):
    """A prepared label file -> {'train', 'valid', 'test'} -> (image names, uint8 labels [N, 14])."""
    path = Path(path)
    try:
        with open(path, newline="") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            expected = [*LABEL_COLUMNS, *FINDINGS]
            if header != expected:
                raise DataError(f"{path}: header {header}, expected {expected}")
            names = {split: [] for split in SPLITS}
            labels = {split: [] for split in SPLITS}
            for line, row in enumerate(reader, start=2):
                if len(row) != len(expected) or row[2] not in SPLITS:
                    raise DataError(f"{path}: line {line} is not image,patient,split(train|valid|test),14 x 0/1")
                try:
                    values = [int(v) for v in row[3:]]
                except ValueError as err:
                    raise DataError(f"{path}: line {line}: {err}") from err
                if set(values) - {0, 1}:
                    raise DataError(f"{path}: line {line}: findings must be 0 or 1")
                names[row[2]].append(row[0])
                labels[row[2]].append(values)
    except OSError as err:
        raise DataError(f"{path}: cannot be read ({err})") from err
    return {split: (names[split], np.asarray(labels[split], dtype=np.uint8).reshape(-1, len(FINDINGS)))
            for split in SPLITS}


def read_manifest(path, columns=("image", "path")):
    """A manifest CSV (image, path[, source]) -> list of dicts; the columns must be there."""
    path = Path(path)
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as err:
        raise DataError(f"{path}: cannot be read ({err})") from err
    if not rows:
        raise DataError(f"{path}: no images listed")
    missing = [c for c in columns if c not in rows[0]]
    if missing:
        raise DataError(f"{path}: lacks the column(s) {missing}")
    return rows


def split_files(labels_csv, manifest, split):
    """(image paths, float32 labels [N, 14]) of one split, in the label file's order, the paths
    from the manifest (relative ones taken from the manifest's folder)."""
    names, labels = read_labels_csv(labels_csv)[split]
    manifest = Path(manifest)
    paths = {}
    for row in read_manifest(manifest):
        path = Path(row["path"])
        paths[row["image"]] = path if path.is_absolute() else manifest.parent / path
    missing = [name for name in names if name not in paths]
    if missing:
        raise DataError(f"{manifest}: {len(missing)} {split} images of {labels_csv} are not listed, "
                        f"e.g. {', '.join(missing[:3])}")
    if not names:
        raise DataError(f"{labels_csv}: the {split} split is empty")
    return [str(paths[name]) for name in names], labels.astype(np.float32)


def write_manifest(path, rows, columns):
    """Write atomically: a manifest is there complete or not at all."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(columns), extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    tmp.replace(path)


# --- synthetic images --------------------------------------------------------------------------

def _smooth_noise(rng, size, cells):
    """Low-frequency noise: a cells x cells random grid, bilinearly upsampled to size x size
    (separably, with elementwise numpy: no BLAS threads)."""
    grid = rng.standard_normal((cells, cells)).astype(np.float32)
    position = np.linspace(0, cells - 1, size, dtype=np.float32)
    low = np.clip(np.floor(position).astype(np.int64), 0, cells - 2)
    weight = position - low
    columns = grid[:, low] * (1 - weight) + grid[:, low + 1] * weight          # cells x size
    return columns[low] * (1 - weight)[:, None] + columns[low + 1] * weight[:, None]


def _soft_ellipse(y, x, cy, cx, ry, rx, edge=0.08):
    """1 inside the ellipse, 0 outside, a smooth ramp of relative width `edge` across its border."""
    r = np.sqrt(((y - cy) / ry) ** 2 + ((x - cx) / rx) ** 2)
    return np.clip((1 + edge - r) / (2 * edge), 0, 1)


def synthetic_image(name, seed, size=ORIGINAL_SIZE):
    """A grayscale uint8 size x size image that looks vaguely like a frontal chest X-ray: a bright
    body, two dark lungs, a bright spine and heart shadow, low-frequency texture and fine grain.
    Deterministic in (name, seed); a few hundredths of a second at 1024 x 1024 (the anatomy is
    drawn at half the size and doubled; the texture and grain are drawn at full size)."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    jitter = rng.uniform(-0.03, 0.03, 8).astype(np.float32)
    half = (size + 1) // 2
    coords = np.linspace(0, 1, half, dtype=np.float32)
    y, x = coords[:, None], coords[None, :]
    body = _soft_ellipse(y, x, 0.55, 0.5, 0.55 + jitter[0], 0.45 + jitter[1], edge=0.05)
    lungs = (_soft_ellipse(y, x, 0.45 + jitter[2], 0.3 + jitter[3], 0.28, 0.14)
             + _soft_ellipse(y, x, 0.45 + jitter[4], 0.7 + jitter[5], 0.28, 0.14))
    heart = _soft_ellipse(y, x, 0.62 + jitter[6], 0.55 + jitter[7], 0.13, 0.12, edge=0.2)
    spine = np.exp(-(((x - 0.5) / 0.04) ** 2))
    anatomy = 36 + 150 * body - 110 * lungs + 60 * heart * lungs + 50 * spine * body
    image = anatomy.repeat(2, axis=0).repeat(2, axis=1)[:size, :size]
    image += 12 * _smooth_noise(rng, size, 12) + 4 * _smooth_noise(rng, size, 48)
    image += rng.integers(0, 9, (size, size), dtype=np.uint8)  # grain: PNGs of a realistic size
    return np.clip(image, 0, 255).astype(np.uint8)


def save_png(image, path, compress_level=SYNTHETIC_PNG_COMPRESSION):
    """A uint8 grayscale array as an 8-bit grayscale PNG (Pillow)."""
    from PIL import Image
    Image.fromarray(image).save(path, format="PNG", compress_level=compress_level)


# --- image I/O ---------------------------------------------------------------------------------

def read_image(path, reader="pillow"):
    """An image file as a 2-D grayscale uint8 array, decoded by Pillow (or pillow-simd, whichever
    the environment has) or OpenCV; a missing or undecodable file is a DataError that names it."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: missing")
    if reader == "pillow":
        from PIL import Image
        try:
            with Image.open(path) as image:
                image.load()
                if image.mode != "L":  # a few NIH PNGs are RGBA
                    image = image.convert("L")
                return np.asarray(image)
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as err:
            raise DataError(f"{path}: unreadable image ({err})") from err
    if reader == "opencv":
        import cv2
        image = cv2.imread(str(path), cv2.IMREAD_GRAYSCALE)
        if image is None:
            raise DataError(f"{path}: unreadable image (OpenCV could not decode it)")
        return image
    raise ValueError(f"unknown image reader {reader!r}, expected one of {READERS}")


def check_image(path):
    """None if the file decodes (Pillow, fully), else why not: 'missing' or 'unreadable (...)'."""
    try:
        read_image(path, "pillow")
    except DataError as err:
        return str(err).split(": ", 1)[1]
    return None


def resize_file(src, dst, size=RESIZED_SIZE, fmt="jpeg", reader="pillow"):
    """Read src, resize it to size x size with area averaging, save it as JPEG (quality 90) or PNG.

    Area-style averaging with both readers. OpenCV: INTER_AREA, the exact area average (a pixel
    the output pixel half covers gets half the weight). Pillow (and pillow-simd, which gives the
    same pixels): the BOX filter, the plain mean of the input pixels whose centres the output
    pixel covers. At 1024 -> 264 the two differ by at most a few grey levels (mean about 0.4).
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}, expected one of {tuple(FORMATS)}")
    if reader == "pillow":
        from PIL import Image
        path = Path(src)
        if not path.is_file():
            raise DataError(f"{path}: missing")
        try:
            with Image.open(path) as image:
                image = image.convert("L") if image.mode != "L" else image
                small = image.resize((size, size), Image.Resampling.BOX)
        except (OSError, ValueError, SyntaxError) as err:
            raise DataError(f"{path}: unreadable image ({err})") from err
        if fmt == "jpeg":
            small.save(dst, format="JPEG", quality=JPEG_QUALITY)
        else:
            small.save(dst, format="PNG", compress_level=PNG_COMPRESSION)
        return
    if reader == "opencv":
        import cv2
        small = cv2.resize(read_image(src, "opencv"), (size, size), interpolation=cv2.INTER_AREA)
        params = ([cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY] if fmt == "jpeg"
                  else [cv2.IMWRITE_PNG_COMPRESSION, PNG_COMPRESSION])
        if not cv2.imwrite(str(dst), small, params):
            raise DataError(f"{dst}: OpenCV could not write it")
        return
    raise ValueError(f"unknown image reader {reader!r}, expected one of {READERS}")


def prepare_reader(reader):
    """Import the reader's library and its decoders now (not inside the first timed image), and
    make OpenCV single-threaded: the processes are the parallelism (OpenCV would start threads
    of its own; Pillow decodes and resizes in the calling thread)."""
    if reader == "pillow":
        from PIL import Image
        Image.init()
    elif reader == "opencv":
        import cv2
        cv2.setNumThreads(1)
    else:
        raise ValueError(f"unknown image reader {reader!r}, expected one of {READERS}")


def summed_peak_rss(reports):
    """Peak RSS of this process plus each worker's, from (pid, peak RSS) reports: the sum of
    the peaks, an upper bound of the memory the run held at one time."""
    per_process = {os.getpid(): peak_rss_bytes()}
    for pid, rss in reports:
        per_process[pid] = max(rss, per_process.get(pid, 0))
    return sum(per_process.values())


def benchmark_order(count, images, seed, unit):
    """Indices into `count` images for one timed unit of `images` images: seeded permutations
    (from the seed and the unit) laid end to end, so a unit's size does not depend on how many
    images there are (each is used once per pass) and every unit reads a different order."""
    if count < 1:
        raise ValueError("no images to draw from")
    rng = np.random.default_rng([seed, unit])
    return np.concatenate([rng.permutation(count) for _ in range(-(-images // count))])[:images]


def reader_version(reader):
    """The version of the library behind a reader (pillow-simd reports e.g. '12.1.1.post0')."""
    if reader == "pillow":
        import PIL
        return PIL.__version__
    if reader == "opencv":
        import cv2
        return cv2.__version__
    raise ValueError(f"unknown image reader {reader!r}, expected one of {READERS}")


# --- transforms --------------------------------------------------------------------------------

def sample_rng(seed, epoch, index):
    """The random state of one sample's augmentation, the same in every framework and loader
    (it depends on the seed, the epoch and the sample's index, not on worker or batch)."""
    return np.random.default_rng([seed, epoch, index])


def augmentation(seed, epoch, indices, size, crop=CROP_SIZE):
    """(top, left, flip) int32 arrays of the samples `indices` in `epoch`, for size x size
    images: each drawn from sample_rng(seed, epoch, index) as train_transform draws them (top,
    then left, in 0..size-crop, then a horizontal flip with p=0.5). For loaders that crop
    in their own operators (tf.data, MXNet) with the same values as every other framework."""
    params = np.empty((len(indices), 3), dtype=np.int32)
    for row, index in enumerate(np.asarray(indices).ravel()):
        rng = sample_rng(seed, epoch, int(index))
        params[row] = rng.integers(0, size - crop + 1), rng.integers(0, size - crop + 1), rng.random() < 0.5
    return params[:, 0], params[:, 1], params[:, 2]


# Every grey level's three normalised channel values, [256, 3] (and [3, 256]): normalising is
# then one table look-up per pixel, 5-10 times faster than the arithmetic and equal to it.
_NORMALISED_HWC = ((np.arange(256, dtype=np.float32) * np.float32(1 / 255))[:, None] - IMAGENET_MEAN) / IMAGENET_STD
_NORMALISED_CHW = np.ascontiguousarray(_NORMALISED_HWC.T)


def to_normalised(image, channels_last=False):
    """uint8 H x W grey -> float32 3 x H x W (or H x W x 3), grey replicated, ImageNet mean/std:
    (grey / 255 - mean[c]) / std[c]."""
    if image.dtype != np.uint8:
        raise ValueError(f"expected a uint8 image, got {image.dtype}")
    if channels_last:
        return np.take(_NORMALISED_HWC, image, axis=0)
    return np.take(_NORMALISED_CHW, image, axis=1)


def _check_size(image, crop):
    if image.ndim != 2 or image.shape[0] < crop or image.shape[1] < crop:
        raise ValueError(f"expected a 2-D grey image of at least {crop} x {crop}, got shape {image.shape}")


def train_transform(image, rng, crop=CROP_SIZE, channels_last=False):
    """Random crop (top, then left, drawn from rng), horizontal flip with p=0.5 (drawn next),
    then to_normalised. image: uint8 H x W (264 x 264 after preprocessing)."""
    _check_size(image, crop)
    top, left = rng.integers(0, image.shape[0] - crop + 1), rng.integers(0, image.shape[1] - crop + 1)
    patch = image[top:top + crop, left:left + crop]
    if rng.random() < 0.5:
        patch = patch[:, ::-1]
    return to_normalised(patch, channels_last)


def eval_transform(image, crop=CROP_SIZE, channels_last=False):
    """Centre crop, then to_normalised."""
    _check_size(image, crop)
    top, left = (image.shape[0] - crop) // 2, (image.shape[1] - crop) // 2
    return to_normalised(image[top:top + crop, left:left + crop], channels_last)
