"""Chainer's loaders: chainer.iterators over a dataset in the run's order, once (no shuffle, no
repeat), their worker processes stopped by the adapter's teardown."""
import itertools

import chainer


def iterator(placement, dataset, batch_size, workers):
    """A SerialIterator (workers 0: loads in this process, no background threads) or a
    MultiprocessIterator with `workers` worker processes, over `dataset` in order, once."""
    if workers == 0:
        found = chainer.iterators.SerialIterator(dataset, batch_size, repeat=False, shuffle=False)
    else:
        found = chainer.iterators.MultiprocessIterator(dataset, batch_size, repeat=False, shuffle=False,
                                                       n_processes=workers)
    placement.handles["iterators"].append(found)
    return found


def started(batches, workers):
    """An iterator's batches, with a MultiprocessIterator's worker pool started now: it starts
    at the first batch asked for, so that batch is fetched here, outside the clock (the other
    frameworks' loaders start their workers before the first block too), and comes first."""
    if workers == 0:
        return batches
    first = next(batches, None)
    return iter(()) if first is None else itertools.chain([first], batches)
