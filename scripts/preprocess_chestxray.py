"""Resize every ChestX-ray14 image of a manifest once, to SIZE x SIZE (264 by default), and save
it as JPEG (quality 90) or PNG, with Pillow (or pillow-simd, whichever the environment has) or
OpenCV, in N processes; write the manifest of the resized images and a run record of how long
it took (workload chestxray-preprocess).

Both backends shrink by area averaging: Pillow's BOX filter and OpenCV's INTER_AREA
(dlbench.chestxray.resize_file).
"""
import argparse
import os
import time
from datetime import datetime, timezone
from multiprocessing import Pool
from pathlib import Path

from dlbench.cli import positive_int
from dlbench.chestxray import (BACKENDS, FORMATS, RESIZED_SIZE, DataError, backend_version,
                                prepare_backend, read_manifest, resize_file, summed_peak_rss, write_manifest)
from dlbench.files import staged
from dlbench.record import make_record, peak_rss_bytes, write_json


def _resize(item):
    src, dst, size, fmt, backend = item
    resize_file(src, dst, size, fmt, backend)
    return os.getpid(), peak_rss_bytes()


def run_items(function, items, processes, backend):
    """function over items in this process (processes == 1) or a Pool; results in order."""
    if processes == 1:
        return [function(item) for item in items]
    with Pool(processes, initializer=prepare_backend, initargs=(backend,)) as pool:
        return pool.map(function, items, chunksize=max(1, min(16, len(items) // (4 * processes))))


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--manifest", type=Path, required=True, help="images.csv from prepare_chestxray.py images")
    parser.add_argument("--backend", choices=BACKENDS, required=True)
    parser.add_argument("--format", choices=tuple(FORMATS), required=True)
    parser.add_argument("--size", type=positive_int, default=RESIZED_SIZE)
    parser.add_argument("--threads", type=positive_int, default=1, help="processes")
    parser.add_argument("--out-dir", type=Path, required=True, help="the resized images")
    parser.add_argument("--out-manifest", type=Path, required=True, help="manifest to write: image, path")
    parser.add_argument("--record", type=Path, required=True, help="run record (JSON) to write")
    parser.add_argument("--backend-name", required=True,
                        help="the record's framework: pillow-simd, pillow or opencv (the library behind the backend)")
    parser.add_argument("--seed", type=int, default=0, help="recorded only (resizing draws nothing)")
    args = parser.parse_args()

    try:
        rows = read_manifest(args.manifest)
    except DataError as err:
        raise SystemExit(f"error: {err}")
    out_dir = args.out_dir.resolve()
    names = [Path(row["image"]).stem + FORMATS[args.format] for row in rows]
    outputs = [out_dir / name for name in names]

    prepare_backend(args.backend)  # imported before the clock (and before the workers fork)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    # Written beside, and swapped in whole when every image is done: a bad image keeps the old folder.
    with staged(out_dir, whole_folder=True) as staging:
        items = [(row["path"], staging / name, args.size, args.format, args.backend) for row, name in zip(rows, names)]
        t0 = time.perf_counter()
        try:
            reports = run_items(_resize, items, args.threads, args.backend)
        except DataError as err:
            raise SystemExit(f"error: {err}")
        wall_s = time.perf_counter() - t0

    write_manifest(args.out_manifest, [{"image": row["image"], "path": str(dst)} for row, dst in zip(rows, outputs)],
                   ("image", "path"))
    spec = {"workload": "chestxray-preprocess", "framework": args.backend_name,
            "run_id": f"backend~{args.backend_name}_format~{args.format}", "backend": args.backend,
            "format": args.format, "size": args.size, "threads": args.threads, "images": len(rows), "epochs": 1,
            "seed": args.seed, "device": "cpu", "timeout_s": 0}
    result = {
        "status": "ok",
        "framework_version": backend_version(args.backend),
        "device": {"kind": "cpu", "count": 1, "names": []},
        "threads": {"processes": args.threads},
        "epochs": [{"epoch": 1, "wall_s": wall_s, "samples": len(rows), "loss": None,  # nothing is trained
                    "metric": {"images_per_s": len(rows) / wall_s}, "eval_s": None}],
        "peak_rss_bytes": summed_peak_rss(reports),
        "resample": "BOX" if args.backend == "pillow" else "INTER_AREA",
        "output_bytes": sum(path.stat().st_size for path in outputs),
    }
    args.record.parent.mkdir(parents=True, exist_ok=True)
    write_json(args.record, make_record(spec, {"backend": args.backend_name, "format": args.format}, result, 0, [], started, wall_s))
    print(f"{args.backend_name} {args.format}: {len(rows)} images in {wall_s:.2f} s "
          f"({len(rows) / wall_s:.1f} images/s, {args.threads} processes)")


if __name__ == "__main__":
    main()
