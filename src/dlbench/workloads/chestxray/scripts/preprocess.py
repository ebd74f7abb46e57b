"""Resize ChestX-ray14 images to SIZE x SIZE (264 by default) and save them as JPEG (quality 90)
or PNG, with Pillow (or pillow-simd, whichever the environment has) or OpenCV, in N processes.

  prepare  every image of a manifest once, for training and the decode benchmark: the resized
           images and their manifest (not a measurement; it prints how long it took)
  bench    the preprocessing benchmark (workload chestxray-preprocess): a warm-up unit, then
           --units steady units, each resizing --images source images (drawn in turn from the
           manifest in an order from the seed and the unit, cycling through it as often as
           needed) into a scratch folder that is deleted after the unit; the processes start
           before the clock and serve every unit; a run record with images/s per unit

Both readers shrink by area averaging: Pillow's BOX filter and OpenCV's INTER_AREA
(dlbench.workloads.chestxray.images.resize_file).
"""
import argparse
import os
import tempfile
import time
from datetime import datetime, timezone
from multiprocessing import Pool
from pathlib import Path

from dlbench.cli import positive_int
from dlbench.errors import DataError
from dlbench.workloads.chestxray.images import (READERS, FORMATS, RESIZED_SIZE, reader_version, benchmark_order,
                                                prepare_reader, resize_file, summed_peak_rss)
from dlbench.workloads.chestxray.labels import read_manifest, write_manifest
from dlbench.files import staged
from dlbench.machine import CpuMeter
from dlbench.record import fixed_unit, make_record, peak_rss_bytes, write_json


def _resize(item):
    src, dst, size, fmt, reader = item
    resize_file(src, dst, size, fmt, reader)
    return os.getpid(), peak_rss_bytes()


def start_pool(processes, reader):
    """processes > 1: a Pool whose workers have the reader imported; 1: None (this process)."""
    return Pool(processes, initializer=prepare_reader, initargs=(reader,)) if processes > 1 else None


def run_items(function, items, pool, processes):
    """function over items in this process (pool None) or the pool; results in order."""
    if pool is None:
        return [function(item) for item in items]
    return pool.map(function, items, chunksize=max(1, min(16, len(items) // (4 * processes))))


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
        pool = start_pool(args.threads, args.reader)
        try:
            run_items(_resize, items, pool, args.threads)
        finally:
            if pool:
                pool.terminate()
        wall_s = time.perf_counter() - t0
    write_manifest(args.out_manifest, [{"image": row["image"], "path": str(dst)} for row, dst in zip(rows, outputs)],
                   ("image", "path"))
    print(f"{args.format}, {args.reader}: {len(rows)} images resized in {wall_s:.2f} s with {args.threads} "
          f"processes (not a measurement: the bench command is)")


def bench(args):
    sources = [row["path"] for row in read_manifest(args.manifest)]
    suffix = FORMATS[args.format]
    # The library imported and the processes started before the clock; they serve every unit.
    prepare_reader(args.reader)
    meter = CpuMeter()  # created first: the pool's workers are its descendants
    pool = start_pool(args.threads, args.reader)
    # Scratch beside the record, on the results disk where preprocessing writes (/tmp may be RAM).
    args.record.parent.mkdir(parents=True, exist_ok=True)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    t_run = time.perf_counter()
    units, reports, written = [], [], 0
    try:
        for unit in range(1, args.units + 2):  # unit 1 is the warm-up
            order = benchmark_order(len(sources), args.images, args.seed, unit)
            with tempfile.TemporaryDirectory(dir=args.record.parent, prefix=".preprocess-") as scratch:
                # Named by position: a source drawn twice in a unit is written twice.
                items = [(sources[i], Path(scratch) / f"{n:06d}{suffix}", args.size, args.format, args.reader)
                         for n, i in enumerate(order)]
                before = meter.read()
                t0 = time.perf_counter()
                reports += run_items(_resize, items, pool, args.threads)
                wall_s = time.perf_counter() - t0
                machine = meter.usage(before, meter.read())
                written += sum(item[1].stat().st_size for item in items)
            units.append(fixed_unit(unit, args.images, args.images, wall_s, machine))  # a step is one image
            print(f"unit {unit}{' (warm-up)' if unit == 1 else ''}: {args.images} images in {wall_s:.2f} s "
                  f"({args.images / wall_s:.1f} images/s)")
    finally:
        if pool:
            pool.terminate()
    spec = {"workload": "chestxray-preprocess", "framework": args.library,
            "run_id": f"library~{args.library}_format~{args.format}_repeat~{args.repeat}",
            "reader": args.reader, "format": args.format, "size": args.size, "threads": args.threads,
            "images": args.images, "source_images": len(sources), "units": args.units,
            "seed": args.seed, "repeat": args.repeat, "device": "cpu", "timeout_s": 0}
    result = {
        "status": "ok",
        "framework_version": reader_version(args.reader),
        "device": {"kind": "cpu", "count": 1, "names": []},
        "threads": {"processes": args.threads},
        "units": units,
        "plan": {"unit_steps": args.images, "warmup_units": 1, "warmup_end": "cap"},
        "peak_rss_bytes": summed_peak_rss(reports),
        "resample": "BOX" if args.reader == "pillow" else "INTER_AREA",
        "output_bytes_per_image": written / (args.images * len(units)),
    }
    point = {"library": args.library, "format": args.format, "repeat": args.repeat}
    write_json(args.record, make_record(spec, point, result, 0, [], started, time.perf_counter() - t_run))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--manifest", type=Path, required=True, help="images.csv from prepare_chestxray.py images")
    common.add_argument("--reader", choices=READERS, required=True)
    common.add_argument("--format", choices=tuple(FORMATS), required=True)
    common.add_argument("--size", type=positive_int, default=RESIZED_SIZE)
    common.add_argument("--threads", type=positive_int, default=1, help="processes")

    p = commands.add_parser("prepare", parents=[common], help="resize every image once (training data)")
    p.add_argument("--out-dir", type=Path, required=True, help="the resized images")
    p.add_argument("--out-manifest", type=Path, required=True, help="manifest to write: image, path")

    b = commands.add_parser("bench", parents=[common], help="time resizing (a run record)")
    b.add_argument("--images", type=positive_int, required=True, help="source images resized per unit")
    b.add_argument("--units", type=positive_int, default=3, help="steady units after the warm-up unit")
    b.add_argument("--seed", type=int, default=0, help="the order the images are drawn in")
    b.add_argument("--repeat", type=positive_int, default=1, help="which repeat of the point this run is")
    b.add_argument("--record", type=Path, required=True, help="run record (JSON) to write")
    b.add_argument("--library", required=True,
                   help="the record's framework: pillow-simd, pillow or opencv (the library behind the reader)")
    args = parser.parse_args()
    try:
        (prepare if args.command == "prepare" else bench)(args)
    except DataError as err:
        raise SystemExit(f"error: {err}")


if __name__ == "__main__":
    main()
