"""ChestX-ray14's preprocessing timed: an image library resizing source images to data.size
(area averaging: Pillow's BOX filter, OpenCV's INTER_AREA; images.resize_file) and writing them
in `format`, in `threads` processes, timed by the protocol's clock.

Epochs of `images` source images (the manifest's in turn), in the run's order; a step resizes
and writes one batch, spread over the processes, into the run's scratch folder (one file per
sample and epoch; the folder goes with the run). The processes start outside the clock, with
the library imported, and serve every block.
"""
from multiprocessing import Pool

from dlbench.contract import WithoutModel
from dlbench.workloads.chestxray.images import FORMATS, prepare_reader, reader_version, resize_file
from dlbench.workloads.chestxray.labels import read_manifest


def resize(item):
    src, dst, size, fmt, reader = item
    resize_file(src, dst, size, fmt, reader)


class ChestXrayPreprocess(WithoutModel):
    def load_data(self):
        sources = [row["path"] for row in read_manifest(self.spec.data.images)]
        # An epoch of `images` images, independent of how many there are: the files in turn.
        self.sources = [sources[i % len(sources)] for i in range(self.spec.images)]
        self.n_train = self.spec.images

    def build_training(self):
        prepare_reader(self.spec.reader)
        self.library_version = reader_version(self.spec.reader)
        threads = self.placement.threads
        self.pool = Pool(threads, initializer=prepare_reader, initargs=(self.spec.reader,)) if threads > 1 else None

    def batches(self, order, epochs):
        spec, suffix = self.spec, FORMATS[self.spec.format]
        for batch, epoch in zip(order, epochs):
            items = [(self.sources[i], self.scratch / f"{epoch}-{i}{suffix}", spec.data.size, spec.format, spec.reader)
                     for i in batch]
            if self.pool is None:
                yield [resize(item) for item in items]
            else:
                yield self.pool.map(resize, items)


WORKLOAD = ChestXrayPreprocess
