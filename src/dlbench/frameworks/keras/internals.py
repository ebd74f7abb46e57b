"""Every use of Keras' private API (keras.src), written for Keras 3.15.1 and checked at import
(dlbench.frameworks.check_written_for). Imported only after configure, like Keras itself.

What each works around:
- drop_queued_batches: under a tf.distribute strategy, fit builds its model from a batch it
  reads before the first epoch; with worker processes, PyDatasetEnqueuer.stop keeps the
  batches loaded ahead "for the next run", and epoch 1 would train on them first. fit keeps its
  enqueuer to itself (keras/src/trainers/data_adapters/py_dataset_adapter.py): found among the
  objects the garbage collector tracks, its ready queue emptied.
- fit_epoch_iterator: the loader benchmark reads a PyDataset as fit does, without a model:
  through the backend's epoch iterator (keras/src/backend/<backend>/trainer.py:
  JAXEpochIterator, TorchEpochIterator), which Keras does not export.
- densenet: keras.applications exports DenseNet-121, -169 and -201 only; the builder they call
  (keras/src/applications/densenet.py: DenseNet(blocks, ...)) builds any four dense blocks with
  the same layers and names, e.g. the default's smaller DenseNet (config chestxray.blocks).
"""
import gc
import queue

import keras

from dlbench.frameworks import check_written_for

WRITTEN_FOR = "3.15.1"
check_written_for(__file__, "keras", keras.__version__, WRITTEN_FOR)


def drop_queued_batches(dataset):
    """Empty the ready queue of the enqueuer fit made of `dataset` (a PyDataset with workers)."""
    if not dataset.workers:
        return  # no enqueuer
    from keras.src.trainers.data_adapters.py_dataset_adapter import PyDatasetEnqueuer

    for enqueuer in [obj for obj in gc.get_objects() if isinstance(obj, PyDatasetEnqueuer)]:
        if enqueuer.py_dataset is dataset:
            while True:
                try:
                    enqueuer.ready_queue.get_nowait()
                except queue.Empty:
                    break


def fit_epoch_iterator(dataset):
    """The iterator that model.fit makes of a PyDataset on this backend (JAX or torch), reset as
    fit does before its first epoch."""
    if keras.backend.backend() == "jax":
        from keras.src.backend.jax.trainer import JAXEpochIterator as EpochIterator
    else:
        from keras.src.backend.torch.trainer import TorchEpochIterator as EpochIterator
    iterator = EpochIterator(x=dataset, shuffle=False)
    iterator.reset()
    return iterator


def densenet(blocks, **kwargs):
    """keras.applications' DenseNet with `blocks` dense layers in its four blocks."""
    from keras.src.applications.densenet import DenseNet

    return DenseNet(list(blocks), **kwargs)
