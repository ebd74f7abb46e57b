import csv
import dataclasses
import gzip
import json
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest

from dlbench.errors import DataError
from dlbench.specs import spec_to_json
from dlbench.workloads.chestxray.images import (CROP_SIZE, IMAGENET_MEAN, IMAGENET_STD, eval_transform, sample_rng,
                                                to_normalised, train_transform)
from dlbench.workloads.chestxray.definition import LIBRARIES
from dlbench.workloads.chestxray.labels import (PATHOLOGIES, SPLITS, WHEEL_MEMBER, LabelRow, choose_subset,
                                                patient_split, read_label_file, read_labels_csv, read_manifest,
                                                read_nih_labels, read_wheel_labels, write_labels_csv)
from dlbench.workloads.chestxray.synthetic import synthetic_image
from dlbench.workloads.chestxray.metrics import auc_per_pathology, average_ranks, macro_auc, roc_auc
from conftest import REPO, venv_python
from specs import smoke_spec

SCRIPTS = REPO / "src" / "dlbench" / "workloads" / "chestxray" / "scripts"
HEADER = ("Image Index,Finding Labels,Follow-up #,Patient ID,Patient Age,Patient Gender,View Position,"
          "OriginalImage[Width,Height],OriginalImagePixelSpacing[x,y]")


def nih_line(image, pathologies, patient, follow_up=0):
    return f"{image},{pathologies},{follow_up},{patient},57,M,PA,2682,2749,0.143,0.143"


SMALL = "\n".join([
    HEADER,
    nih_line("00000001_000.png", "Cardiomegaly", 1),
    nih_line("00000001_001.png", "Cardiomegaly|Emphysema", 1, 1),
    nih_line("00000002_000.png", "No Finding", 2),
    nih_line("00000003_000.png", "Hernia|Atelectasis|Pleural_Thickening", 3),
]) + "\n"


def synthetic_label_text(patients=300, seed=0):
    """An NIH label file of `patients` patients with 1 to 6 images each and random findings."""
    rng = np.random.default_rng(seed)
    lines = [HEADER]
    for patient in range(1, patients + 1):
        for follow_up in range(int(rng.integers(1, 7))):
            found = [name for name in PATHOLOGIES if rng.random() < 0.08]
            lines.append(nih_line(f"{patient:08d}_{follow_up:03d}.png", "|".join(found) or "No Finding", patient,
                                  follow_up))
    return "\n".join(lines) + "\n"


def write_wheel(path, text):
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr("torchxrayvision/__init__.py", "")
        wheel.writestr(WHEEL_MEMBER, gzip.compress(text.encode()))
    return path


# --- labels ------------------------------------------------------------------------------------

def test_findings_are_the_14_nih_findings_in_order():
    assert PATHOLOGIES == ("Atelectasis", "Cardiomegaly", "Effusion", "Infiltration", "Mass", "Nodule", "Pneumonia",
                        "Pneumothorax", "Consolidation", "Edema", "Emphysema", "Fibrosis", "Pleural_Thickening",
                        "Hernia")


def test_label_file_gives_multi_hot_rows_and_no_finding_is_all_zero(tmp_path):
    path = tmp_path / "Data_Entry_2017_v2020.csv"
    path.write_text(SMALL)
    rows = read_label_file(path)
    assert [(r.image, r.patient) for r in rows] == [("00000001_000.png", "1"), ("00000001_001.png", "1"),
                                                    ("00000002_000.png", "2"), ("00000003_000.png", "3")]
    assert all(r.labels.dtype == np.uint8 and r.labels.shape == (14,) for r in rows)
    assert np.flatnonzero(rows[0].labels).tolist() == [1]             # Cardiomegaly
    assert np.flatnonzero(rows[1].labels).tolist() == [1, 10]         # + Emphysema
    assert rows[2].labels.sum() == 0                                  # No Finding
    assert np.flatnonzero(rows[3].labels).tolist() == [0, 12, 13]     # Atelectasis, Pleural_Thickening, Hernia


def test_gzipped_label_file_and_wheel_read_the_same(tmp_path):
    plain = tmp_path / "Data_Entry_2017_v2020.csv"
    plain.write_text(SMALL)
    packed = tmp_path / "Data_Entry_2017_v2020.csv.gz"
    packed.write_bytes(gzip.compress(SMALL.encode()))
    wheel = write_wheel(tmp_path / "torchxrayvision-1.5.7-py3-none-any.whl", SMALL)
    expected = read_label_file(plain)
    for rows in (read_label_file(packed), read_wheel_labels(wheel)):
        assert [(r.image, r.patient, r.labels.tolist()) for r in rows] == \
               [(r.image, r.patient, r.labels.tolist()) for r in expected]


def test_nih_folder_takes_either_label_file_name(tmp_path):
    (tmp_path / "Data_Entry_2017.csv.gz").write_bytes(gzip.compress(SMALL.encode()))
    assert len(read_nih_labels(tmp_path)) == 4
    (tmp_path / "Data_Entry_2017_v2020.csv").write_text(SMALL.replace("Hernia|", ""))  # preferred when present
    assert read_nih_labels(tmp_path)[3].labels[13] == 0
    with pytest.raises(DataError, match=r"empty.*no NIH label file.*Data_Entry_2017_v2020.csv"):
        read_nih_labels(tmp_path / "empty")


def test_unknown_finding_names_file_line_and_finding(tmp_path):
    path = tmp_path / "Data_Entry_2017.csv"
    path.write_text(SMALL.replace("Cardiomegaly|Emphysema", "Cardiomegaly|Pneumonitis"))
    with pytest.raises(DataError, match=r"Data_Entry_2017.csv: line 3: unknown pathology 'Pneumonitis'"):
        read_label_file(path)


def test_bad_label_files_are_errors_that_name_them(tmp_path):
    path = tmp_path / "Data_Entry_2017.csv"
    path.write_text(SMALL.replace("Patient ID", "Patient"))
    with pytest.raises(DataError, match=r"Data_Entry_2017.csv: header lacks.*Patient ID"):
        read_label_file(path)
    path.write_text(SMALL + nih_line("00000001_000.png", "No Finding", 1) + "\n")
    with pytest.raises(DataError, match=r"line 6: image 00000001_000.png already listed on line 2"):
        read_label_file(path)
    path.write_bytes(gzip.compress(SMALL.encode())[:40])
    with pytest.raises(DataError, match="Data_Entry_2017.csv: corrupt gzip"):
        read_label_file(path)
    cut = SMALL + "\n" + nih_line("00000041_000.png", "Mass", 41)
    path.write_text(cut[:cut.rindex(",41,") + 3])  # the file ends inside patient 41's id
    with pytest.raises(DataError, match=r"Data_Entry_2017.csv: line \d+ has 4 fields, the header 11"):
        read_label_file(path)
    broken = tmp_path / "torchxrayvision.whl"
    broken.write_bytes(b"not a zip")
    with pytest.raises(DataError, match="torchxrayvision.whl: not a readable torchxrayvision wheel"):
        read_wheel_labels(broken)


# --- split and subset --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def many_rows(tmp_path_factory):
    path = tmp_path_factory.mktemp("labels") / "Data_Entry_2017_v2020.csv"
    path.write_text(synthetic_label_text())
    return read_label_file(path)


def test_patient_split_keeps_patients_whole_and_fractions_close(many_rows):
    split = patient_split(many_rows, (0.7, 0.1, 0.2), seed=3)
    patients = {name: {r.patient for r in rows} for name, rows in split.items()}
    assert not patients["train"] & patients["valid"]
    assert not patients["train"] & patients["test"]
    assert not patients["valid"] & patients["test"]
    assert sorted(r.image for rows in split.values() for r in rows) == sorted(r.image for r in many_rows)
    for name, fraction in zip(SPLITS, (0.7, 0.1, 0.2)):
        assert abs(len(split[name]) / len(many_rows) - fraction) < 0.02, name
    # Rows keep the order of the label file within a split.
    position = {r.image: i for i, r in enumerate(many_rows)}
    assert all([position[r.image] for r in rows] == sorted(position[r.image] for r in rows) for rows in split.values())


def test_patient_split_is_deterministic_in_the_seed(many_rows):
    images = lambda split: {name: [r.image for r in rows] for name, rows in split.items()}  # noqa: E731
    assert images(patient_split(many_rows, seed=1)) == images(patient_split(list(many_rows), seed=1))
    assert images(patient_split(many_rows, seed=1)) != images(patient_split(many_rows, seed=2))
    with pytest.raises(ValueError, match="sum to 1"):
        patient_split(many_rows, (0.7, 0.2, 0.2))


def test_subset_is_a_seeded_prefix_of_each_split(many_rows):
    split = patient_split(many_rows, seed=0)
    small = choose_subset(split, {"train": 10, "valid": 3, "test": None}, seed=5)
    large = choose_subset(split, {"train": 20, "valid": 3, "test": 4}, seed=5)
    assert [len(small[s]) for s in SPLITS] == [10, 3, len(split["test"])]
    assert small["train"] == large["train"][:10] and small["valid"] == large["valid"]
    assert all(set(r.image for r in small[s]) <= set(r.image for r in split[s]) for s in SPLITS)
    assert [r.image for r in small["train"]] != [r.image for r in split["train"][:10]]  # shuffled
    other = choose_subset(split, {"train": 10, "valid": 3, "test": None}, seed=6)
    assert [r.image for r in other["train"]] != [r.image for r in small["train"]]
    assert len(choose_subset(split, {"train": 10**6}, seed=0)["train"]) == len(split["train"])


def test_prepared_label_file_reads_back(tmp_path):
    labels = np.eye(14, dtype=np.uint8)
    rows = {"train": [LabelRow(f"{i}.png", str(i), labels[i]) for i in range(10)],
            "valid": [], "test": [LabelRow("x.png", "99", labels[13])]}
    write_labels_csv(tmp_path / "labels.csv", rows)
    with open(tmp_path / "labels.csv", newline="") as f:
        header = next(csv.reader(f))
    assert header == ["image", "patient", "split", *PATHOLOGIES]
    back = read_labels_csv(tmp_path / "labels.csv")
    assert back["train"][0] == [f"{i}.png" for i in range(10)]
    np.testing.assert_array_equal(back["train"][1], labels[:10])
    assert back["valid"][1].shape == (0, 14) and back["test"][0] == ["x.png"]


# --- AUC, worked by hand -----------------------------------------------------------------------

def test_average_ranks_share_ties():
    assert average_ranks([10, 20, 20, 30]).tolist() == [1, 2.5, 2.5, 4]
    assert average_ranks([3, 1, 3, 3]).tolist() == [3, 1, 3, 3]


def test_auc_hand_examples():
    assert roc_auc([0, 0, 1, 1], [0.1, 0.2, 0.3, 0.4]) == 1.0
    assert roc_auc([1, 1, 0, 0], [0.1, 0.2, 0.3, 0.4]) == 0.0
    # Positives 0.35, 0.8; negatives 0.1, 0.4: 3 of the 4 pairs ordered right.
    assert roc_auc([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]) == pytest.approx(0.75)
    # Positives 0.5, 0.9, 0.2; negatives 0.5, 0.2. Pairs: (.5,.5) 1/2, (.5,.2) 1, (.9,.5) 1, (.9,.2) 1,
    # (.2,.5) 0, (.2,.2) 1/2: 4 of 6.
    assert roc_auc([0, 1, 0, 1, 1], [0.5, 0.5, 0.2, 0.9, 0.2]) == pytest.approx(4 / 6)
    assert roc_auc([0, 1, 0, 1], [0.3] * 4) == 0.5
    assert roc_auc([0, 0, 0], [0.1, 0.2, 0.3]) is None
    assert roc_auc([1, 1], [0.1, 0.2]) is None


def test_auc_matches_counting_pairs_with_many_ties():
    rng = np.random.default_rng(0)
    labels, scores = rng.integers(0, 2, 200), rng.integers(0, 7, 200)
    pos, neg = scores[labels == 1], scores[labels == 0]
    pairs = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    assert roc_auc(labels, scores) == pytest.approx(pairs / (len(pos) * len(neg)))


def test_auc_per_pathology_and_macro_skip_undefined():
    labels = np.array([[0, 1, 0], [1, 1, 0], [0, 1, 0], [1, 1, 0]])
    scores = np.array([[0.1, 0.5, 0.2], [0.9, 0.5, 0.3], [0.2, 0.5, 0.1], [0.4, 0.5, 0.7]])
    per = auc_per_pathology(labels, scores, ["a", "b", "c"])
    assert per == {"a": 1.0, "b": None, "c": None}
    assert macro_auc(per) == 1.0
    assert macro_auc({"a": 1.0, "b": 0.5, "c": None}) == 0.75
    assert macro_auc({"a": None}) is None
    with pytest.raises(ValueError):
        auc_per_pathology(labels, scores[:, :2], ["a", "b", "c"])


# --- synthetic images and transforms (numpy only) ----------------------------------------------

def test_synthetic_images_are_deterministic_and_chest_like():
    a = synthetic_image("00000001_000.png", seed=0)
    assert a.shape == (1024, 1024) and a.dtype == np.uint8
    np.testing.assert_array_equal(a, synthetic_image("00000001_000.png", seed=0))
    assert not np.array_equal(a, synthetic_image("00000001_001.png", seed=0))
    assert not np.array_equal(a, synthetic_image("00000001_000.png", seed=1))
    # Dark lungs either side of a bright spine, smooth at large scale.
    left_lung, spine, right_lung = a[400:500, 280:330].mean(), a[400:500, 500:525].mean(), a[400:500, 690:740].mean()
    assert left_lung < spine - 40 and right_lung < spine - 40
    assert 30 < a.std() < 90


def test_train_transform_is_a_random_crop_and_flip_normalised():
    image = np.random.default_rng(1).integers(0, 256, (264, 264), dtype=np.uint8)
    offsets, flips = set(), set()
    for index in range(40):
        out = train_transform(image, sample_rng(7, 1, index))
        assert out.shape == (3, 224, 224) and out.dtype == np.float32
        grey = out[0] * IMAGENET_STD[0] + IMAGENET_MEAN[0]
        np.testing.assert_allclose(out[2] * IMAGENET_STD[2] + IMAGENET_MEAN[2], grey, atol=1e-5)
        target = np.rint(grey * 255).astype(np.int64)
        found = [(top, left, flip) for top in range(41) for left in range(41) for flip in (False, True)
                 if target[0, 0] == (image[top, left + 223] if flip else image[top, left])
                 and np.array_equal(target, (image[top:top + 224, left:left + 224][:, ::-1] if flip
                                             else image[top:top + 224, left:left + 224]))]
        assert len(found) == 1
        offsets.add(found[0][:2])
        flips.add(found[0][2])
    assert flips == {False, True} and len(offsets) > 30
    np.testing.assert_array_equal(train_transform(image, sample_rng(7, 1, 3)),
                                  train_transform(image, sample_rng(7, 1, 3)))
    assert train_transform(image, sample_rng(7, 1, 3), channels_last=True).shape == (224, 224, 3)
    with pytest.raises(ValueError, match="at least 224"):
        train_transform(image[:200], sample_rng(0, 1, 0))


def test_eval_transform_is_the_centre_crop_and_pixel_values_follow_imagenet_stats():
    image = np.random.default_rng(2).integers(0, 256, (264, 264), dtype=np.uint8)
    np.testing.assert_array_equal(eval_transform(image), to_normalised(image[20:244, 20:244]))
    np.testing.assert_array_equal(eval_transform(image, channels_last=True),
                                  to_normalised(image[20:244, 20:244]).transpose(1, 2, 0))
    grey = np.arange(256, dtype=np.uint8).reshape(16, 16)
    expected = (grey.astype(np.float32)[None] / 255 - IMAGENET_MEAN[:, None, None]) / IMAGENET_STD[:, None, None]
    np.testing.assert_allclose(to_normalised(grey), expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(to_normalised(grey, channels_last=True), to_normalised(grey).transpose(1, 2, 0))
    corners = to_normalised(np.array([[0, 255]], dtype=np.uint8))
    np.testing.assert_allclose(corners[:, 0, 0], -IMAGENET_MEAN / IMAGENET_STD, rtol=1e-6)
    np.testing.assert_allclose(corners[:, 0, 1], (1 - IMAGENET_MEAN) / IMAGENET_STD, rtol=1e-6)
    assert eval_transform(image).shape == (3, CROP_SIZE, CROP_SIZE)


# --- the scripts, in the data environment ------------------------------------------------------

def run(python, script, *args, check=True):
    proc = subprocess.run([python, str(SCRIPTS / script), *map(str, args)], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"{script} {' '.join(map(str, args))} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def in_env(python, code):
    """Run python code in an environment (with scripts/ on the path); its printed JSON."""
    proc = subprocess.run([python, "-c", f"import sys; sys.path.insert(0, {str(SCRIPTS)!r})\n{code}"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


IMAGE_INFO = """
import json
from PIL import Image
out = {}
for path in sys.argv[1:] if len(sys.argv) > 1 else PATHS:
    with Image.open(path) as image:
        out[path] = [image.format, image.mode, list(image.size)]
print(json.dumps(out))
"""


def image_info(python, paths):
    return in_env(python, f"PATHS = {[str(p) for p in paths]!r}\n{IMAGE_INFO}")


@pytest.fixture(scope="module")
def data_python():
    return venv_python("data")


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, data_python):
    """Labels from a wheel-like zip (24 chosen images) and their synthetic PNGs."""
    folder = tmp_path_factory.mktemp("chestxray")
    wheel = write_wheel(folder / "torchxrayvision-1.5.7-py3-none-any.whl", synthetic_label_text(60))
    out = run(data_python, "prepare.py", "labels", "--wheel", wheel, "--seed", 3, "--split", 0.6, 0.2, 0.2,
              "--train", 16, "--valid", 4, "--test", "4", "--out", folder / "labels.csv").stdout
    assert "train: 16 of" in out
    run(data_python, "prepare.py", "images", "--labels", folder / "labels.csv", "--synthetic-dir",
        folder / "png", "--seed", 3, "--threads", 2, "--manifest", folder / "images.csv")
    return folder


@pytest.mark.slow
def test_synthetic_images_are_1024_grayscale_pngs_for_the_chosen_rows(prepared, data_python):
    labels = read_csv(prepared / "labels.csv")
    assert [row["split"] for row in labels] == ["train"] * 16 + ["valid"] * 4 + ["test"] * 4
    listed = read_csv(prepared / "images.csv")
    # the images the workflow drew are listed from the manifest's folder: the folder can move
    assert all(row["source"] == "synthetic" and row["path"] == f"png/{row['image']}" for row in listed)
    manifest = read_manifest(prepared / "images.csv")
    assert [row["image"] for row in manifest] == [row["image"] for row in labels]
    info = image_info(data_python, [row["path"] for row in manifest])
    assert set(map(tuple, ([f, m, tuple(s)] for f, m, s in info.values()))) == {("PNG", "L", (1024, 1024))}
    same = in_env(data_python, f"""
import json, numpy as np
from dlbench.workloads.chestxray.images import read_image
from dlbench.workloads.chestxray.synthetic import synthetic_image
print(json.dumps(bool(np.array_equal(read_image({manifest[0]['path']!r}, 'opencv'),
                                      synthetic_image({manifest[0]['image']!r}, 3)))))""")
    assert same


@pytest.mark.slow
def test_nih_folder_reports_every_missing_and_corrupt_image_and_writes_nothing(prepared, data_python, tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    manifest = read_manifest(prepared / "images.csv")
    for row in manifest:
        (images / row["image"]).write_bytes(Path(row["path"]).read_bytes())
    missing, corrupt = manifest[2]["image"], manifest[5]["image"]
    (images / missing).unlink()
    data = (images / corrupt).read_bytes()
    (images / corrupt).write_bytes(data[: len(data) // 2])  # truncated inside the image data
    proc = run(data_python, "prepare.py", "images", "--labels", prepared / "labels.csv", "--images-dir",
               images, "--threads", 2, "--manifest", tmp_path / "images.csv", check=False)
    assert proc.returncode != 0
    assert "2 of the 24 images" in proc.stderr
    assert f"{missing}: missing" in proc.stderr and f"{corrupt}: unreadable" in proc.stderr
    assert not (tmp_path / "images.csv").exists()
    # Put them back: the manifest lists the user's files, absolute.
    (images / missing).write_bytes(Path(manifest[2]["path"]).read_bytes())
    (images / corrupt).write_bytes(data)
    run(data_python, "prepare.py", "images", "--labels", prepared / "labels.csv", "--images-dir", images,
        "--threads", 2, "--manifest", tmp_path / "images.csv")
    rows = read_csv(tmp_path / "images.csv")
    assert [row["path"] for row in rows] == [str(images.resolve() / row["image"]) for row in manifest]
    assert {row["source"] for row in rows} == {"nih"}


@pytest.fixture(scope="module")
def preprocessed(prepared, data_python):
    """Each reader and format: the manifest of the resized images."""
    out = {}
    for reader, name in (("pillow", "pillow-simd"), ("opencv", "opencv")):
        for fmt in ("jpeg", "png"):
            base = prepared / f"{name}-{fmt}"
            run(data_python, "preprocess.py", "--manifest", prepared / "images.csv", "--reader",
                reader, "--format", fmt, "--size", 264, "--threads", 2, "--out-dir", base, "--out-manifest",
                f"{base}.csv")
            out[reader, fmt] = Path(f"{base}.csv")
    return out


def first_rows(manifest, count, dest):
    """A manifest of the first `count` rows of another: fewer images than an epoch takes."""
    rows = read_manifest(manifest)[:count]
    with open(dest, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return dest


def run_library(run_set, images, record_path, threads=2, **row):
    """A run of an image library's benchmark (a run of no framework) through the harness, in the
    library's environment: its record."""
    spec = smoke_spec(run_set, None, threads=threads, **row)
    spec = dataclasses.replace(spec, data=dataclasses.replace(spec.data, images=str(images)))
    proc = subprocess.run([venv_python(LIBRARIES[row["library"]].env), "-m", "dlbench.harness", "--spec",
                           spec_to_json(spec), "--out", str(record_path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return json.loads(record_path.read_text())


def check_units(record):
    """Measured as every run is: calibration, warm-up and steady units of the protocol's clock,
    each with what the machine did while it ran; no framework, the library's version."""
    kinds = [u["kind"] for u in record["units"]]
    assert record["status"] == "ok", record["error"]
    assert kinds.count("steady") == record["spec"]["measure"]["steady_units"] and kinds[0] == "calibration"
    for unit in record["units"]:
        assert unit["samples"] == unit["steps"] * record["spec"]["batch"] and unit["loss"] is None
        assert unit["wall_s"] > 0 and set(unit["machine"]) == {"steal_s", "other_cpu_s", "run_cpu_s", "minor_faults",
                                                               "cpus"}
    assert record["framework"] is None and record["environment"]["framework_version"] is None
    assert record["environment"]["library_version"] and record["devices_used"]["kind"] == "cpu"


@pytest.mark.slow
def test_preparing_gives_264_images_in_the_format_and_no_record(preprocessed, prepared, data_python):
    for (reader, fmt), manifest in preprocessed.items():
        assert all(row["path"] == f"{manifest.stem}/{Path(row['image']).stem}.{fmt.replace('jpeg', 'jpg')}"
                   for row in read_csv(manifest))  # from the manifest's folder
        rows = read_manifest(manifest)
        assert len(rows) == 24
        info = image_info(data_python, [row["path"] for row in rows])
        expected = ("JPEG" if fmt == "jpeg" else "PNG", "L", (264, 264))
        assert {(f, m, tuple(s)) for f, m, s in info.values()} == {expected}, (reader, fmt)
    assert not list(prepared.glob("*.json"))


@pytest.mark.slow
@pytest.mark.parametrize("library,fmt,threads", [("pillow-simd", "jpeg", 2), ("opencv", "png", 1)])
def test_preprocessing_is_timed_by_the_clock_and_leaves_no_images(prepared, tmp_path, library, fmt, threads):
    source = first_rows(prepared / "images.csv", 6, tmp_path / "six.csv")
    record_path = tmp_path / "runs" / "record.json"
    record = run_library("chestxray-preprocess", source, record_path, threads, library=library, format=fmt, repeat=2)
    assert record["run_set"] == "chestxray-preprocess"
    assert record["run_id"] == f"library~{library}_format~{fmt}_repeat~2"
    assert record["point"] == {"library": library, "format": fmt} and record["spec"]["repeat"] == 2
    check_units(record)
    assert record["spec"]["reader"] == ("pillow" if library == "pillow-simd" else "opencv")
    assert record["spec"]["threads"] == threads and record["train_samples"] == record["spec"]["images"]
    assert [p.name for p in record_path.parent.iterdir()] == [record_path.name]  # the scratch folder is gone


@pytest.mark.slow
def test_pillow_box_and_opencv_area_resize_nearly_agree(preprocessed, data_python):
    pillow, opencv = read_manifest(preprocessed["pillow", "png"]), read_manifest(preprocessed["opencv", "png"])
    diff = in_env(data_python, f"""
import json, numpy as np
from dlbench.workloads.chestxray.images import read_image
d = np.stack([np.abs(read_image(a, 'pillow').astype(int) - read_image(b, 'opencv'))
              for a, b in zip({[r['path'] for r in pillow]!r}, {[r['path'] for r in opencv]!r})])
print(json.dumps([int(d.max()), float(d.mean())]))""")
    # BOX (the mean of the pixels whose centres fall inside) vs INTER_AREA (the exact area mean).
    assert diff[0] <= 8 and diff[1] < 1


@pytest.mark.slow
@pytest.mark.parametrize("library,fmt,workers", [("pillow-simd", "png", 0), ("opencv", "jpeg", 2)])
def test_decoding_is_timed_by_the_clock(preprocessed, tmp_path, library, fmt, workers):
    six = first_rows(preprocessed["pillow" if library == "pillow-simd" else "opencv", fmt], 6, tmp_path / "six.csv")
    record = run_library("chestxray-decode", six, tmp_path / "decode.json", library=library, format=fmt,
                         workers=workers, repeat=3)
    assert record["run_set"] == "chestxray-decode"
    assert record["run_id"] == f"library~{library}_format~{fmt}_workers~{workers}_repeat~3"
    assert record["point"] == {"library": library, "format": fmt, "workers": workers} and record["spec"]["repeat"] == 3
    check_units(record)
    assert record["spec"]["workers"] == workers
    wrong = {"library": library, "format": "png" if fmt == "jpeg" else "jpeg", "workers": workers, "repeat": 1}
    record = run_library("chestxray-decode", six, tmp_path / "wrong.json", **wrong)
    assert record["status"] == "failed" and "are not" in record["error"]


@pytest.mark.slow
def test_workers_hand_over_the_same_batches_as_the_main_process(preprocessed, data_python):
    paths = [row["path"] for row in read_manifest(preprocessed["opencv", "png"])]
    same = in_env(data_python, f"""
import json, multiprocessing
import numpy as np
from dlbench.workloads.chestxray.decode import task as d
d._SLOTS = d.batch_slots(4, 5)
paths = {paths!r}
batches = [([paths[j % len(paths)] for j in range(i, i + 5)], list(range(i, i + 5)), 1, 2, 'opencv')
           for i in range(0, 30, 5)]
here = [d._SLOTS[slot, :n].copy() for slot, n in d.in_process(batches)]
with multiprocessing.get_context('fork').Pool(2) as pool:
    there = [d._SLOTS[slot, :n].copy() for slot, n in d.from_workers(pool, batches, 4)]
print(json.dumps([len(here), [a.shape[0] for a in here], all(np.array_equal(a, b) for a, b in zip(here, there))]))""")
    assert same == [6, [5, 5, 5, 5, 5, 5], True]
