"""Keras' input.

A `RunBatches` PyDataset whose item i is the batch of the run's step offset + i,
PyDataset(workers=spec.workers, use_multiprocessing=True). With 0 workers Keras has no
enqueuer: batches load in the training process as fit asks for them. With N > 0 workers
Keras' OrderedEnqueuer loads them in a multiprocessing pool of N processes, up to
max_queue_size (10) batches ahead, in index order; the enqueuer stops at every fit epoch's end
and does not resume where it was, so with workers each block is a fit of its own (a new
iterator from the block's first step; the pool's start inside the block's clock, as in any fit
epoch). JAX reads the PyDataset as a plain iterator on a CPU, torch through a DataLoader without
workers. keras-tensorflow is given a tf.data pipeline of the same batches instead (`tf_pipeline`:
the same load through tf.numpy_function, `workers` parallel calls), the TensorFlow modules'
idiom: Keras would read a PyDataset through tf.data.Dataset.from_generator, which sets glibc's
M_TRIM_THRESHOLD for the whole process, and the two TensorFlow frameworks would differ in the
allocator rather than in Keras.
"""
import functools

import numpy as np


@functools.cache
def _run_batches_class():
    """RunBatches subclasses Keras' PyDataset: made at first use (Keras is imported after configure)."""
    import keras

    class RunBatches(keras.utils.PyDataset):
        """Item i: the batch of the run's step `offset` + i, load(its epoch, its indices), in this
        process or in one of Keras' `workers` worker processes. Before set_run (what fit may read
        before its first epoch: see step.py's docstring) every item is a stand-in, the batch of
        the first global batch's indices, loaded as epoch 0."""

        def __init__(self, load, batch, workers):
            super().__init__(workers=workers, use_multiprocessing=workers > 0)
            self.load, self.offset = load, 0
            self.order, self.epochs = np.arange(batch).reshape(1, batch), np.zeros(1, dtype=np.int64)  # the stand-in

        def set_run(self, order, epochs):
            self.order, self.epochs = order, epochs

        def __len__(self):
            return len(self.order) - self.offset

        def __getitem__(self, index):
            step = self.offset + index
            return self.load(int(self.epochs[step]), self.order[step])

    return RunBatches


def run_batches(load, batch, workers):
    """A keras.utils.PyDataset of the run's order (RunBatches); load(epoch, indices) -> a batch."""
    return _run_batches_class()(load, batch, workers)


@functools.cache
def _resident_batches_class():
    import keras

    class ResidentBatches(keras.utils.PyDataset):
        """A PyDataset of arrays kept on the device, as RunBatches to fit (set_run, offset,
        workers): the arrays (here) and each step's indices (set_run) are put on the Keras backend's
        device (keras.ops.convert_to_tensor), outside the clock; item i is the step offset + i's batch,
        array k gathered there by keras.ops.take at the step's indices % len(array k). Read in
        the training process (no workers): what the engine's trainer receives is already on its
        device, and its own copy (jax.device_put, torch's .to) has nothing to move. Before
        set_run, items are a stand-in, the first `batch` rows."""

        def __init__(self, arrays, batch):
            super().__init__(workers=0, use_multiprocessing=False)
            self.lengths, self.offset = [len(array) for array in arrays], 0
            self.arrays = tuple(keras.ops.convert_to_tensor(array) for array in arrays)
            self.set_run(np.arange(batch).reshape(1, batch), np.zeros(1, dtype=np.int64))

        def set_run(self, order, epochs):
            self.steps = [tuple(keras.ops.convert_to_tensor(row % length) for length in self.lengths) for row in order]

        def __len__(self):
            return len(self.steps) - self.offset

        def __getitem__(self, index):
            indices = self.steps[self.offset + index]
            return tuple(keras.ops.take(array, rows, axis=0) for array, rows in zip(self.arrays, indices))

    return ResidentBatches


def resident_batches(arrays, batch):
    """A keras.utils.PyDataset of the run's order gathered on the device from `arrays` (ResidentBatches)."""
    return _resident_batches_class()(arrays, batch)


def tf_pipeline(dataset):
    """keras-tensorflow's input: a tf.data pipeline over the same items as the PyDataset
    `dataset` (from its offset on), each batch loaded by the same load(epoch, indices) through
    tf.numpy_function, `workers` parallel calls and as many prefetched (none with 0 workers), as
    the TensorFlow modules' loaders do. Keras would read a PyDataset through
    tf.data.Dataset.from_generator, which sets glibc's M_TRIM_THRESHOLD for the whole process
    (the TensorFlow adapter's comments): with it the two TensorFlow frameworks' input paths
    would differ in the allocator, not in Keras."""
    import tensorflow as tf

    from dlbench.frameworks.tensorflow.loaders import loader_options

    if not hasattr(dataset, "example"):  # one batch's dtypes and shapes, loaded once (before the first fit)
        dataset.example = dataset.load(int(dataset.epochs[0]), dataset.order[0])
    example = dataset.example
    dtypes = [tf.as_dtype(part.dtype) for part in example]

    def load(epoch, indices):
        return dataset.load(int(epoch), indices)

    def load_batch(epoch, indices):
        parts = tf.numpy_function(load, [epoch, indices], dtypes, stateful=False)
        for part, shape in zip(parts, (e.shape for e in example)):
            part.set_shape(shape)
        return tuple(parts)

    steps = slice(dataset.offset, None)
    workers = dataset.workers
    data = tf.data.Dataset.from_tensor_slices((dataset.epochs[steps], dataset.order[steps])).map(
        load_batch, num_parallel_calls=workers or None)
    if workers:
        data = data.prefetch(workers)
    return data.with_options(loader_options(workers))


def fit_input(workload):
    """What model.fit reads: the workload's PyDataset (keras-jax, keras-torch), or on TensorFlow
    a tf.data pipeline of the same batches (tf_pipeline)."""
    if workload.placement.handles["keras_backend"] == "tensorflow":
        return tf_pipeline(workload.train_data)
    return workload.train_data


def fit_epoch_iterator(dataset):
    """The iterator that model.fit makes of a PyDataset on this backend, for a loop that reads
    the batches as fit does without a model (the loader benchmark); Keras' private API
    (internals.py). On TensorFlow fit reads the tf_pipeline, iterated as it is."""
    from dlbench.frameworks.keras import internals

    return internals.fit_epoch_iterator(dataset)


def epoch_of(epoch_iterator):
    """The batches of a fit_epoch_iterator (one epoch: the whole run), batch by batch, as fit's
    train function receives them (torch: a list of the step's batches; JAX: the iterator it
    reads one from)."""
    for _, _, data in epoch_iterator:
        if isinstance(data, list):
            yield from data
        else:
            yield next(data)


