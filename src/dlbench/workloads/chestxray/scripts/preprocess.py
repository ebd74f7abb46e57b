"""Resize every image of a manifest once to SIZE x SIZE (264 by default) and save it as JPEG
(quality 90) or PNG, with Pillow (or pillow-simd, whichever the environment has) or OpenCV, in
N processes: the training data and the decode benchmark's images, with their manifest. Not a
measurement (it prints how long it took): the chestxray-preprocess run set times resizing.

Both readers shrink by area averaging: Pillow's BOX filter and OpenCV's INTER_AREA
(dlbench.workloads.chestxray.images.resize_file).
"""
import argparse
import time
from multiprocessing import Pool
from pathlib import Path

from dlbench.argument_types import positive_int
from dlbench.errors import DataError
from dlbench.files import staged
from dlbench.workloads.chestxray.images import FORMATS, READERS, RESIZED_SIZE, prepare_reader, resize_file
from dlbench.workloads.chestxray.labels import listed_path, read_manifest, write_manifest


def _resize(item):
    src, dst, size, fmt, reader = item
    resize_file(src, dst, size, fmt, reader)


def prepare(args):
    rows = read_manifest(args.manifest)
    out_dir = args.out_dir.resolve()
    names = [Path(row["image"]).stem + FORMATS[args.format] for row in rows]
    outputs = [out_dir / name for name in names]
    prepare_reader(args.reader)
    # Written beside, and swapped in whole when every image is done: a bad image keeps the old folder.
    with staged(out_dir, whole_folder=True) as staging:
        items = [(row["path"], staging / name, args.size, args.format, args.reader) for row, name in zip(rows, names)]
        t0 = time.perf_counter()
        if args.threads == 1:
            for item in items:
                _resize(item)
        else:
            with Pool(args.threads, initializer=prepare_reader, initargs=(args.reader,)) as pool:
                pool.map(_resize, items, chunksize=max(1, min(16, len(items) // (4 * args.threads))))
        wall_s = time.perf_counter() - t0
    write_manifest(args.out_manifest, [{"image": row["image"], "path": listed_path(dst, args.out_manifest)}
                                       for row, dst in zip(rows, outputs)], ("image", "path"))
    print(f"{args.format}, {args.reader}: {len(rows)} images resized in {wall_s:.2f} s with {args.threads} "
          f"processes (not a measurement: the chestxray-preprocess runs are)")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--manifest", type=Path, required=True, help="images.csv from prepare.py images")
    parser.add_argument("--reader", choices=READERS, required=True)
    parser.add_argument("--format", choices=tuple(FORMATS), required=True)
    parser.add_argument("--size", type=positive_int, default=RESIZED_SIZE)
    parser.add_argument("--threads", type=positive_int, default=1, help="processes")
    parser.add_argument("--out-dir", type=Path, required=True, help="the resized images")
    parser.add_argument("--out-manifest", type=Path, required=True, help="manifest to write: image, path")
    args = parser.parse_args()
    try:
        prepare(args)
    except DataError as err:
        raise SystemExit(f"error: {err}")


if __name__ == "__main__":
    main()
