"""ChestX-ray14 (NIH) labels: the label readers, the patient split and subsets, the manifests.

Labels come from the NIH label file, `Data_Entry_2017_v2020.csv` (or the older
`Data_Entry_2017.csv`), plain or gzipped: the copy the torchxrayvision wheel ships, or the
user's NIH folder. A row is (image name, patient id, multi-hot uint8[14] over PATHOLOGIES);
"No Finding" is all zeros. The standard library and numpy only (every environment imports it)."""
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


# The 14 pathologies, in the order of the NIH paper and of every model's 14 outputs.
PATHOLOGIES = ("Atelectasis", "Cardiomegaly", "Effusion", "Infiltration", "Mass", "Nodule", "Pneumonia",
               "Pneumothorax", "Consolidation", "Edema", "Emphysema", "Fibrosis", "Pleural_Thickening", "Hernia")
NO_FINDING = "No Finding"
_PATHOLOGY_INDEX = {name: i for i, name in enumerate(PATHOLOGIES)}
WHEEL_MEMBER = "torchxrayvision/data/Data_Entry_2017_v2020.csv.gz"
# In a user's NIH folder, the first of these that exists is the label file.
NIH_LABEL_FILES = ("Data_Entry_2017_v2020.csv", "Data_Entry_2017_v2020.csv.gz",
                   "Data_Entry_2017.csv", "Data_Entry_2017.csv.gz")
IMAGE_COLUMN, FINDINGS_COLUMN, PATIENT_COLUMN = "Image Index", "Finding Labels", "Patient ID"
SPLITS = ("train", "valid", "test")
DEFAULT_FRACTIONS = (0.7, 0.1, 0.2)
# The prepared label file (prepare_chestxray.py labels): these columns, then the 14 findings.
LABEL_COLUMNS = ("image", "patient", "split")
LabelRow = namedtuple("LabelRow", "image patient labels")


def parse_pathologies(text, name, line):
    """'Cardiomegaly|Emphysema' -> multi-hot uint8[14]; 'No Finding' -> zeros."""
    labels = np.zeros(len(PATHOLOGIES), dtype=np.uint8)
    for pathology in text.split("|"):
        pathology = pathology.strip()
        if pathology == NO_FINDING:
            continue
        index = _PATHOLOGY_INDEX.get(pathology)
        if index is None:
            raise DataError(f"{name}: line {line}: unknown pathology {pathology!r} (known: {', '.join(PATHOLOGIES)}, "
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
        rows.append(LabelRow(image, patient, parse_pathologies(row[i_findings], name, line)))
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
    """The prepared label file: image, patient, split, then 0/1 per pathology."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([*LABEL_COLUMNS, *PATHOLOGIES])
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
            expected = [*LABEL_COLUMNS, *PATHOLOGIES]
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
                    raise DataError(f"{path}: line {line}: pathologies must be 0 or 1")
                names[row[2]].append(row[0])
                labels[row[2]].append(values)
    except OSError as err:
        raise DataError(f"{path}: cannot be read ({err})") from err
    return {split: (names[split], np.asarray(labels[split], dtype=np.uint8).reshape(-1, len(PATHOLOGIES)))
            for split in SPLITS}


def read_manifest(path, columns=("image", "path")):
    """A manifest CSV (image, path[, source]) -> list of dicts; the columns must be there. A relative
    `path` is taken from the manifest's folder (listed_path)."""
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
    if "path" in columns:
        for row in rows:
            row["path"] = str(path.parent / row["path"])  # an absolute path stays as it is
    return rows


def split_files(labels_csv, manifest, split):
    """(image paths, float32 labels [N, 14]) of one split, in the label file's order, the paths
    from the manifest."""
    names, labels = read_labels_csv(labels_csv)[split]
    manifest = Path(manifest)
    paths = {row["image"]: row["path"] for row in read_manifest(manifest)}
    missing = [name for name in names if name not in paths]
    if missing:
        raise DataError(f"{manifest}: {len(missing)} {split} images of {labels_csv} are not listed, "
                        f"e.g. {', '.join(missing[:3])}")
    if not names:
        raise DataError(f"{labels_csv}: the {split} split is empty")
    return [str(paths[name]) for name in names], labels.astype(np.float32)


def listed_path(image, manifest):
    """How a manifest lists an image the workflow made (drew or resized): relative to the
    manifest's folder, so that the results folder can move (read_manifest takes it from there).
    The user's own images are listed as given."""
    return os.path.relpath(image, Path(manifest).parent)


def write_manifest(path, rows, columns):
    """Write atomically: a manifest is there complete or not at all."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(columns), extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    tmp.replace(path)
