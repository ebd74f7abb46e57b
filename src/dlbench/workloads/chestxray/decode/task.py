"""The ChestX-ray14 loader without a framework: what a framework's loader does, with an image
library alone, timed by the protocol's clock like every loader.

Epochs of `images` of the library's preprocessed images (the manifest's in turn), in the run's
order; each sample decoded (the library's reader), randomly cropped to 224, flipped with
p=0.5 (from sample_rng(seed, epoch, index), as in every framework's loader) and normalised
into float32 3 x 224 x 224 (images.train_transform), batch by batch, in this process
(workers 0) or in `workers` worker processes, as a framework's data loader does: the workers
write their batches into shared memory (as PyTorch's DataLoader puts its tensors in shared
memory), at most PREFETCH batches per worker in flight, and this process takes the batches in
order. The workers start outside the clock and serve every block (persistent workers); a
step takes one batch.
"""
import mmap
import multiprocessing
from collections import deque
from pathlib import Path

import numpy as np

from dlbench.contract import WithoutModel
from dlbench.errors import DataError
from dlbench.workloads.chestxray.images import (CROP_SIZE, FORMAT_SUFFIXES, prepare_reader, read_image, reader_version,
                                                sample_rng, train_transform)
from dlbench.workloads.chestxray.labels import read_manifest

PREFETCH = 2  # batches in flight per worker
_SLOTS = None  # float32 [slots, batch, 3, 224, 224]: the batch buffers, shared with the forked workers


def batch_slots(slots, batch_size):
    """Batch buffers in anonymous shared memory (MAP_SHARED): a worker forked after this writes
    into the same pages that this process reads."""
    shape = (slots, batch_size, 3, CROP_SIZE, CROP_SIZE)
    buffer = mmap.mmap(-1, int(np.prod(shape)) * 4)
    return np.frombuffer(buffer, dtype=np.float32).reshape(shape)


def load_batch(item):
    """Decode and transform one batch into its slot: (slot, images)."""
    slot, paths, indices, seed, epoch, reader = item
    for row, (path, index) in enumerate(zip(paths, indices)):
        _SLOTS[slot, row] = train_transform(read_image(path, reader), sample_rng(seed, epoch, index))
    return slot, len(paths)


def in_process(batches):
    """workers 0: each batch decoded here, into slot 0."""
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
        slot, n = pending.popleft().get()
        yield slot, n   # a training step would use _SLOTS[slot, :n] here
        free.append(slot)
        submit()


class ChestXrayDecode(WithoutModel):
    def load_data(self):
        manifest = self.spec.data.images
        paths = [row["path"] for row in read_manifest(manifest)]
        wrong = [p for p in paths if Path(p).suffix.lower() not in FORMAT_SUFFIXES[self.spec.format]]
        if wrong:
            raise DataError(f"{manifest}: {len(wrong)} images are not {self.spec.format}, e.g. {wrong[0]}")
        # An epoch of `images` images, independent of how many there are: the files in turn.
        self.paths = [paths[i % len(paths)] for i in range(self.spec.images)]
        self.n_train = self.spec.images

    def build_training(self):
        global _SLOTS
        prepare_reader(self.spec.reader)
        self.library_version = reader_version(self.spec.reader)
        self.slots = PREFETCH * self.spec.workers if self.spec.workers else 1
        _SLOTS = batch_slots(self.slots, self.spec.batch)
        # fork: the workers inherit the shared batch buffers (and the imported library).
        self.pool = multiprocessing.get_context("fork").Pool(self.spec.workers) if self.spec.workers else None

    def batches(self, order, epochs):
        items = (([self.paths[i] for i in batch], batch.tolist(), self.spec.seed, int(epoch), self.spec.reader)
                 for batch, epoch in zip(order, epochs))
        return from_workers(self.pool, items, self.slots) if self.pool else in_process(items)


WORKLOAD = ChestXrayDecode
