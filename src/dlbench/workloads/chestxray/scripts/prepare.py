"""ChestX-ray14 preparation, in two steps.

labels: the real NIH label file (from the torchxrayvision wheel or the user's NIH folder) ->
        a patient-wise train/valid/test split -> a seeded subset -> labels.csv (image, patient,
        split, the 14 pathologies as 0/1).
images: the images that labels.csv lists -> a manifest (image, path, source): the user's NIH
        PNGs, each checked to exist and decode, or synthetic 1024x1024 grayscale PNGs drawn
        for the real label rows.
"""
import argparse
import os
from multiprocessing import Pool
from pathlib import Path

from dlbench.argument_types import positive_int
from dlbench.errors import DataError
from dlbench.workloads.chestxray.images import check_image
from dlbench.workloads.chestxray.labels import (
    DEFAULT_FRACTIONS,
    SPLITS,
    choose_subset,
    listed_path,
    patient_split,
    read_labels_csv,
    read_nih_labels,
    read_wheel_labels,
    write_labels_csv,
    write_manifest,
)
from dlbench.workloads.chestxray.synthetic import save_png, synthetic_image

MANIFEST_COLUMNS = ("image", "path", "source")


def labels(args):
    try:
        rows = read_wheel_labels(args.wheel) if args.wheel else read_nih_labels(args.nih_dir)
    except DataError as err:
        raise SystemExit(f"error: {err}")
    split = patient_split(rows, args.fractions, args.seed)
    chosen = choose_subset(split, {"train": args.train, "valid": args.valid, "test": args.test}, args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_labels_csv(args.out, chosen)
    print(f"{len(rows)} labelled images of {len({r.patient for r in rows})} patients in "
          f"{args.wheel or args.nih_dir}")
    for name in SPLITS:
        kept = chosen[name]
        positives = sum(int(r.labels.sum() > 0) for r in kept)
        print(f"{name}: {len(kept)} of {len(split[name])} images, {len({r.patient for r in kept})} patients, "
              f"{positives} with a pathology")


def _check(item):
    name, path = item
    return name, check_image(path)


def _draw(item):
    name, path, seed = item
    save_png(synthetic_image(name, seed), path)
    return name


def images(args):
    try:
        listed = [name for names, _ in read_labels_csv(args.labels).values() for name in names]
    except DataError as err:
        raise SystemExit(f"error: {err}")
    with Pool(args.threads) as pool:
        if args.images_dir:
            folder = args.images_dir.resolve()
            items = [(name, folder / name) for name in listed]
            problems = [(name, why) for name, why in pool.imap(_check, items, chunksize=8) if why]
            if problems:
                lines = "\n".join(f"  {name}: {why}" for name, why in sorted(problems))
                raise SystemExit(f"error: {len(problems)} of the {len(listed)} images that {args.labels} lists "
                                 f"cannot be used from {folder}:\n{lines}")
            rows = [{"image": name, "path": str(path), "source": "nih"} for name, path in items]
        else:
            folder = args.synthetic_dir
            folder.mkdir(parents=True, exist_ok=True)
            items = [(name, folder / name, args.seed) for name in listed]
            for _ in pool.imap_unordered(_draw, items, chunksize=4):
                pass
            rows = [{"image": name, "path": listed_path(path, args.manifest), "source": "synthetic"}
                    for name, path, _ in items]
    args.manifest.parent.mkdir(parents=True, exist_ok=True)
    write_manifest(args.manifest, rows, MANIFEST_COLUMNS)
    print(f"{len(rows)} {rows[0]['source'] if rows else ''} images in {folder}")


def count(text):
    """A count >= 0, or none/null/all for every image of the split."""
    if text.lower() in ("none", "null", "all"):
        return None
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    lab = sub.add_parser("labels", help="NIH labels -> patient split -> seeded subset -> labels.csv")
    source = lab.add_mutually_exclusive_group(required=True)
    source.add_argument("--wheel", type=Path, help="the torchxrayvision==1.5.7 wheel (its NIH label file)")
    source.add_argument("--nih-dir", type=Path, help="an NIH ChestX-ray14 folder with Data_Entry_2017[_v2020].csv[.gz]")
    lab.add_argument("--seed", type=int, default=42, help="the patient split and the subset")
    lab.add_argument("--split", "--fractions", dest="fractions", type=float, nargs=3, default=DEFAULT_FRACTIONS,
                     metavar=("TRAIN", "VALID", "TEST"),
                     help="fractions of the images per split (whole patients; default 0.7 0.1 0.2)")
    for name in SPLITS:
        lab.add_argument(f"--{name}", type=count, default=None, help=f"{name} images to keep (default: all)")
    lab.add_argument("--out", type=Path, required=True, help="labels.csv to write")
    img = sub.add_parser("images", help="labels.csv -> the user's NIH PNGs (checked) or synthetic PNGs, and a manifest")
    img.add_argument("--labels", type=Path, required=True)
    where = img.add_mutually_exclusive_group(required=True)
    where.add_argument("--images-dir", type=Path, help="the user's NIH PNGs (file name = image column)")
    where.add_argument("--synthetic-dir", type=Path, help="draw synthetic 1024x1024 grayscale PNGs into this folder")
    img.add_argument("--seed", type=int, default=42, help="the synthetic images")
    img.add_argument("--threads", type=positive_int, default=os.cpu_count() or 1, help="processes")
    img.add_argument("--manifest", type=Path, required=True, help="images.csv to write: image, path, source")
    args = parser.parse_args()
    labels(args) if args.command == "labels" else images(args)


if __name__ == "__main__":
    main()
