"""JAX's loaders: grain, fed rounds of work in order (`Feed`; see the adapter's docstring)."""
import bisect
import gc
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from dlbench.clock import Plan
from dlbench.errors import FrameworkError
from dlbench.frameworks.jax.step import place_batch


class HostArrays:
    """Numpy arrays for a loader to gather from. In the training process they are the arrays
    themselves; pickled for grain's spawned workers they travel as files in the loader's folder,
    memory-mapped there (the page cache shares them, as fork shares the arrays of PyTorch's and
    MXNet's workers)."""

    def __init__(self, arrays, folder=None):
        self.arrays, self.paths = tuple(arrays), None
        if folder is not None:
            self.paths = []
            for i, array in enumerate(self.arrays):
                path = Path(folder) / f"array-{i}.npy"
                np.save(path, array)
                self.paths.append(str(path))

    def __getstate__(self):
        if self.paths is None:
            return {"arrays": self.arrays, "paths": None}
        return {"arrays": None, "paths": self.paths}

    def __setstate__(self, state):
        self.paths = state["paths"]
        self.arrays = state["arrays"]
        if self.arrays is None:
            self.arrays = tuple(np.load(path, mmap_mode="r") for path in self.paths)

    def gather(self, indices):
        return tuple(np.ascontiguousarray(array[indices]) for array in self.arrays)


class GatherBatch:
    """An element loader over the payload (order,): element i = each array gathered at the
    order's row i (a whole index batch in one vectorised gather)."""

    def __init__(self, arrays):
        self.arrays = arrays

    def __call__(self, payload, position):
        order, = payload
        return self.arrays.gather(order[position])


# Reading in the consuming thread: no threads, no prefetch.
IN_THREAD = dict(num_threads=0, prefetch_buffer_size=0)


class _GatedSource:
    """grain's random-access source over every round of a Feed: element k is (round r,
    position); a round's elements wait until its payload file is published. Round 0 is the
    warm-up: one empty element per worker, consumed when the feed starts, so that every worker
    process has started (and imported its modules) before the run."""

    # A waiting worker polls every 1 ms at first, backing off to 50 ms. At 1 ms throughout, a
    # loop like this one took 7% of a core (0.2 s of CPU in 3 s, 870 wake-ups a second, measured),
    # and a ChestX-ray run's two workers wait so beside its training, which gives them no round
    # until its evaluation.
    FIRST_POLL_S, LAST_POLL_S = 0.001, 0.05

    def __init__(self, folder, sizes, load, warmup):
        self.folder, self.load, self.parent = folder, load, os.getpid()
        self.starts = np.cumsum([0, warmup, *sizes]).tolist()
        self.cache = {}

    def __len__(self):
        return self.starts[-1]

    def _payload(self, r):
        if r not in self.cache:
            path = os.path.join(self.folder, f"round-{r}.npz")
            poll_s = self.FIRST_POLL_S
            while not os.path.exists(path):
                if os.path.exists(os.path.join(self.folder, "closed")):
                    raise RuntimeError("the loader was closed")
                if os.getppid() != self.parent:  # the training process is gone
                    os._exit(1)
                time.sleep(poll_s)
                poll_s = min(2 * poll_s, self.LAST_POLL_S)
            with np.load(path) as arrays:  # one round at a time
                self.cache = {r: tuple(arrays[f"arr_{i}"] for i in range(len(arrays.files)))}
        return self.cache[r]

    def __getitem__(self, k):
        r = bisect.bisect_right(self.starts, k) - 1
        if r == 0:
            return np.zeros(0, np.int8)
        return self.load(self._payload(r), k - self.starts[r])


class Feed:
    """A grain loader fed one round at a time: the run's order (the training Feed's one round,
    see `feed_order`), one evaluation's images (a round each).

    sizes: the number of elements of each round, in the order the rounds are read.
    load(payload, position) -> element (numpy arrays), a picklable callable (it runs in the
    workers): payload is the tuple of numpy arrays given to `round` (the order and each step's
    epoch, the paths of a split).

    workers = 0: each round is grain.MapDataset.range(n).map(...) read in the consuming thread
    (IN_THREAD: no threads, no prefetch).
    workers > 0: one pipeline over every round, grain.MapDataset.source(...).to_iter_dataset()
    .mp_prefetch(`workers` processes); worker i loads elements i, i + workers, ... and grain
    interleaves them back in order. The workers start in `start`; each waits for a round's
    payload (a file in the feed's folder), which `round` publishes at the round's first next():
    nothing of a round loads before it is read. From then on a worker runs at most 4 elements
    ahead of what was read (grain's default and smallest buffers: one in its hands, one in its
    queue, two in this process's interleave thread for it).
    A round's unread elements come before the next round's (the pipeline is one sequence):
    a round may be left unread only if it is the Feed's last, as the training order is.
    """

    def __init__(self, placement, sizes, workers, name="feed"):
        try:
            import grain  # noqa: F401
        except ImportError as err:
            raise FrameworkError(f"the JAX loaders are grain's, which this environment lacks ({err})") from err
        self.sizes, self.workers, self.next_round, self.unread = list(sizes), workers, 0, 0
        # The workers' files: shared arrays, each round's payload (nothing with 0 workers).
        self.folder = tempfile.mkdtemp(prefix=f"dlbench-jax-{name}-") if workers > 0 else None
        self.load = self.iterator = None
        placement.handles["feeds"].append(self)

    def start(self, load):
        """Start the workers (workers > 0), each once its first element is asked for: the
        warm-up round, read here."""
        import grain
        from absl import flags

        self.load = load
        if self.workers == 0:
            return self
        if not flags.FLAGS.is_parsed():  # grain's workers read its absl flags; no absl.app here
            flags.FLAGS.mark_as_parsed()
        source = _GatedSource(self.folder, self.sizes, load, warmup=self.workers)
        dataset = (grain.MapDataset.source(source)
                   .to_iter_dataset(grain.ReadOptions(**IN_THREAD))
                   .mp_prefetch(grain.MultiprocessingOptions(num_workers=self.workers)))
        self.iterator = iter(dataset)
        for _ in range(self.workers):
            next(self.iterator)
        for path in Path(self.folder).glob("array-*.npy"):  # every worker has mapped them: the
            path.unlink()  # pages live as long as the maps, and a crash leaves no copy behind
        return self

    def arrays(self, arrays):
        """HostArrays for load callables: shared through the folder when there are workers."""
        return HostArrays(arrays, self.folder if self.workers > 0 else None)

    def round(self, *payload):
        """An iterator over the next round's elements, load(payload, 0), load(payload, 1), ...;
        the round opens at its first next()."""
        import grain

        r = self.next_round
        if r >= len(self.sizes):
            raise RuntimeError(f"a round asked of a loader of {len(self.sizes)} rounds, all given")
        if self.unread:
            raise RuntimeError(f"round {r} asked of a loader whose round {r - 1} has {self.unread} elements unread")
        self.next_round += 1
        n = self.sizes[r]
        self.unread += n
        if self.workers > 0:
            staged = os.path.join(self.folder, f"staged-{r + 1}.npz")
            np.savez(staged, *payload)  # written now, outside the clock; published at the first next()

        def elements():
            if self.workers == 0:
                load = self.load
                source = iter(grain.MapDataset.range(n).map(lambda i: load(payload, i))
                              .to_iter_dataset(grain.ReadOptions(**IN_THREAD)))
            else:
                os.replace(staged, os.path.join(self.folder, f"round-{r + 1}.npz"))
                source = self.iterator
            for _ in range(n):
                element = next(source)
                self.unread -= 1
                yield element

        return elements()

    @property
    def rounds_left(self):
        return self.sizes[self.next_round:]

    def close(self):
        if self.folder is None:
            return
        Path(self.folder, "closed").touch()  # waiting workers stop waiting
        if self.iterator is not None:
            self.iterator.close()
            self.iterator = None
            gc.collect()  # the pipeline's queues and events: their semaphores are unlinked now, not
            # left to multiprocessing's resource tracker by the protocol's os._exit
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder = None


def order_feed(placement, spec, name):
    """The training loader: a Feed of ONE round, the run's order, Plan.max_steps batches long
    (dlbench.clock.run_order), of which the run reads as many as its blocks take."""
    return Feed(placement, [Plan.max_steps(spec.measure, spec.convergence)], spec.workers, name)


def feed_order(placement, feed, order, *per_step):
    """The device batches of the run's order through an `order_feed` (its one round): payload
    (order, *per_step), e.g. each step's epoch."""
    if feed.rounds_left != [len(order)]:
        raise RuntimeError(f"the training loader has rounds {feed.rounds_left} left, "
                           f"the run's order {len(order)} steps")
    return (place_batch(placement, batch) for batch in feed.round(order, *per_step))
