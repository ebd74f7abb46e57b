"""The ChestX-ray14 loader benchmark without a framework (workload chestxray-decode).

A warm-up unit, then --units steady units, each of --images preprocessed images drawn in turn
from the manifest in an order from the seed and the unit (cycling through it as often as
needed, so the count does not depend on the training subset). Each image is decoded
(Pillow/pillow-simd or OpenCV), randomly cropped to 224, flipped with p=0.5 and normalised into
float32 3 x 224 x 224 (dlbench.workloads.chestxray.images.train_transform; each sample's random state comes from
the seed, the unit and its position in the unit), batch by batch, in this process (--workers 0)
or in W worker processes, as a framework's data loader does: the workers write their batches
into shared memory (as PyTorch's DataLoader puts its tensors in shared memory), at most 2
batches per worker in flight (its prefetch factor), and this process takes the batches in
order. Writes a run record with images/s and the machine's CPU use per unit.
"""
import argparse
import mmap
import multiprocessing
import os
import time
from collections import deque
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from dlbench.cli import positive_int
from dlbench.errors import DataError
from dlbench.workloads.chestxray.images import (READERS, CROP_SIZE, FORMAT_SUFFIXES, reader_version, benchmark_order,
                                                prepare_reader, read_image, sample_rng, summed_peak_rss,
                                                train_transform)
from dlbench.workloads.chestxray.labels import read_manifest
from dlbench.machine import CpuMeter
from dlbench.record import fixed_unit, make_record, peak_rss_bytes, write_json

PREFETCH = 2  # batches in flight per worker
_SLOTS = None  # float32 [slots, batch, 3, 224, 224]: the batch buffers, shared with the forked workers


def batch_slots(slots, batch_size):
    """Batch buffers in anonymous shared memory (MAP_SHARED): a worker forked after this writes
    into the same pages that this process reads."""
    shape = (slots, batch_size, 3, CROP_SIZE, CROP_SIZE)
    buffer = mmap.mmap(-1, int(np.prod(shape)) * 4)
    return np.frombuffer(buffer, dtype=np.float32).reshape(shape)


def load_batch(item):
    """Decode and transform one batch into its slot: (pid, peak RSS, slot, images)."""
    slot, paths, indices, seed, epoch, reader = item
    for row, (path, index) in enumerate(zip(paths, indices)):
        _SLOTS[slot, row] = train_transform(read_image(path, reader), sample_rng(seed, epoch, index))
    return os.getpid(), peak_rss_bytes(), slot, len(paths)


def unit_batches(paths, images, batch_size, seed, unit, reader):
    """The batches of one unit: `images` of the paths in an order from the seed and the unit
    (dlbench.workloads.chestxray.images.benchmark_order); a sample's index is its position in the unit, so an
    image drawn twice is cropped differently."""
    order = benchmark_order(len(paths), images, seed, unit)
    return [([paths[i] for i in order[chunk]], chunk.tolist(), seed, unit, reader)
            for chunk in np.array_split(np.arange(images), range(batch_size, images, batch_size))]


def in_process(batches):
    """--workers 0: each batch decoded here, into slot 0."""
    for batch in batches:
        yield load_batch((0, *batch))


def from_workers(pool, batches, slots):
    """The batches from the workers, in order, at most `slots` in flight."""
    batches, free, pending = iter(batches), list(range(slots)), deque()

    def submit():
        batch = next(batches, None)
        if batch is not None:
            pending.append(pool.apply_async(load_batch, ((free.pop(), *batch),)))

    for _ in range(slots):
        submit()
    while pending:
        pid, rss, slot, n = pending.popleft().get()
        yield pid, rss, slot, n   # a training step would use _SLOTS[slot, :n] here
        free.append(slot)
        submit()


def main():
    global _SLOTS
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--manifest", type=Path, required=True, help="the preprocessed images' manifest (image, path)")
    parser.add_argument("--reader", choices=READERS, required=True)
    parser.add_argument("--format", choices=tuple(FORMAT_SUFFIXES), required=True,
                        help="the format the manifest's images are in")
    parser.add_argument("--workers", type=int, default=0, help="0: decode in this process; W: W worker processes")
    parser.add_argument("--batch-size", type=positive_int, default=32)
    parser.add_argument("--images", type=positive_int, required=True, help="images decoded per unit")
    parser.add_argument("--units", type=positive_int, default=3, help="steady units after the warm-up unit")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--repeat", type=positive_int, default=1, help="which repeat of the point this run is")
    parser.add_argument("--record", type=Path, required=True, help="run record (JSON) to write")
    parser.add_argument("--library", required=True,
                        help="the record's framework: pillow-simd, pillow or opencv (the library behind the reader)")
    args = parser.parse_args()
    if args.workers < 0:
        parser.error(f"--workers must be >= 0, got {args.workers}")

    try:
        rows = read_manifest(args.manifest)
    except DataError as err:
        raise SystemExit(f"error: {err}")
    paths = [row["path"] for row in rows]
    wrong = [p for p in paths if Path(p).suffix.lower() not in FORMAT_SUFFIXES[args.format]]
    if wrong:
        raise SystemExit(f"error: {args.manifest}: {len(wrong)} images are not {args.format}, e.g. {wrong[0]}")

    # The library is imported and the workers started before the clock; the workers live
    # through every unit (persistent workers): a unit times decoding, transforming and
    # handing the batches over, not the start of processes.
    prepare_reader(args.reader)
    slots = PREFETCH * args.workers if args.workers else 1
    _SLOTS = batch_slots(slots, args.batch_size)
    meter = CpuMeter()  # created first: the workers are its descendants
    # fork: the workers inherit the shared batch buffers (and the imported library).
    pool = multiprocessing.get_context("fork").Pool(args.workers) if args.workers else None
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    t_run = time.perf_counter()
    units, reports = [], []
    try:
        for unit in range(1, args.units + 2):  # unit 1 is the warm-up
            batches = unit_batches(paths, args.images, args.batch_size, args.seed, unit, args.reader)
            before = meter.read()
            t0 = time.perf_counter()
            samples = 0
            for pid, rss, _, n in (from_workers(pool, batches, slots) if pool else in_process(batches)):
                samples += n
                reports.append((pid, rss))
            wall_s = time.perf_counter() - t0
            machine = meter.usage(before, meter.read())
            units.append(fixed_unit(unit, len(batches), samples, wall_s, machine))
            print(f"unit {unit}{' (warm-up)' if unit == 1 else ''}: {samples} images in {wall_s:.2f} s "
                  f"({samples / wall_s:.1f} images/s)")
    except DataError as err:
        raise SystemExit(f"error: {err}")
    finally:
        if pool:
            pool.terminate()
    spec = {"workload": "chestxray-decode", "framework": args.library,
            "run_id": f"library~{args.library}_format~{args.format}_workers~{args.workers}_repeat~{args.repeat}",
            "reader": args.reader, "format": args.format, "workers": args.workers, "batch_size": args.batch_size,
            "prefetch": PREFETCH, "images": args.images, "source_images": len(paths), "units": args.units,
            "seed": args.seed, "repeat": args.repeat, "device": "cpu",
            "threads": max(1, args.workers), "timeout_s": 0}
    result = {
        "status": "ok",
        "framework_version": reader_version(args.reader),
        "device": {"kind": "cpu", "count": 1, "names": []},
        "threads": {"processes": max(1, args.workers), "workers": args.workers},
        "units": units,
        "plan": {"unit_steps": len(batches), "warmup_units": 1, "warmup_end": "cap"},
        "peak_rss_bytes": summed_peak_rss(reports),
    }
    args.record.parent.mkdir(parents=True, exist_ok=True)
    point = {"library": args.library, "format": args.format, "workers": args.workers, "repeat": args.repeat}
    write_json(args.record, make_record(spec, point, result, 0, [], started, time.perf_counter() - t_run))


if __name__ == "__main__":
    main()
