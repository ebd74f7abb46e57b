"""Keras 3's backend, one module for the frameworks keras-tensorflow, keras-jax and keras-torch
(the contract: dlbench.protocol), and what the Keras workload modules share: the PyDataset of
the epoch's order, the callback that drives the protocol's clock, model.fit, predictions.

Which Keras backend runs is the environment's KERAS_BACKEND (envs/keras-<backend>.yaml sets
it; the venv's interpreter wrapper exports it), never this code: `check_backend` only checks
that keras.backend.backend() is the one the framework's name says, and stops naming
KERAS_BACKEND and the env file otherwise. Placement, threads and the device sync are the
engine's own backend module's: dlbench.frameworks.tensorflow (threads, visible devices, the
tf.distribute strategy), dlbench.frameworks.jax (the CPU device count and threads, set by its
configure before JAX starts; the sync blocks on a value), dlbench.frameworks.pytorch (threads).
Keras is imported only after `configure` (KERAS_TORCH_DEVICE is read at import).

Strategies, all in one process: "single"; keras-tensorflow "mirrored", tf.distribute's
MirroredStrategy over this process's devices (made by the TensorFlow backend's setup: on a CPU
one logical device per replica), the model built and compiled in its scope; keras-jax
"data-parallel", keras.distribution.DataParallel over N JAX devices (N CPU devices on a CPU),
set before the model is built. keras-torch has none: keras.distribution has no torch
implementation in Keras 3.15.1 (keras/src/backend/__init__.py sets distribution_lib to None
for torch) and the torch trainer's fit runs on one device, so a point of more than one device
is not applicable. Either engine splits each global batch into contiguous per-replica
slices, replica r taking slice r, as dlbench.protocol.shard does.

Training is Keras' own loop: model.compile(Adam, the loss, jit_compile left to Keras' default
per backend: XLA on JAX, not on TensorFlow on a CPU nor on torch), then one model.fit over all
the epochs with shuffle=False and verbose=0, over an `EpochBatches` PyDataset whose item i is
batch i of the current epoch's order. `ClockCallback` drives the protocol's EpochClock from
fit's per-epoch hooks: on_epoch_begin takes the epoch's order (clock.begin), sets it on the
PyDataset, applies the epoch's info (the learning rate), reads optimizer.iterations and starts
the clock; on_epoch_end stops it with the steps Keras ran (optimizer.iterations after minus
before), the epoch's mean loss from fit's logs times the steps, and (JAX) the trainable
variables' values to block on. No per-batch hooks: they would turn off Keras' asynchronous
batch-end dispatch. Evaluation runs in on_epoch_end, after the clock has stopped.

Loading: PyDataset(workers=spec.workers, use_multiprocessing=True). With 0 workers Keras has
no enqueuer: batches load in the training process as fit asks for them. With N > 0 workers
Keras' OrderedEnqueuer loads them in a multiprocessing pool of N processes (forked, so they see
the order the callback set), up to max_queue_size (Keras' default, 10) batches ahead, and
yields them in index order. Threads would not be N workers: Keras runs a PyDataset of one
thread worker in the training thread, and threads share the GIL. Per backend, fit reads the
PyDataset so (keras/src/backend/<backend>/trainer.py): JAX, a plain iterator on a CPU (on a GPU
it starts each batch's transfer one batch ahead, within the epoch); torch, a DataLoader without
workers over it; TensorFlow, tf.data.Dataset.from_generator, with prefetch(AUTOTUNE) when there
is no enqueuer: with 0 workers one tf.data thread runs the loading ahead of the step, as Keras
does for any PyDataset on TensorFlow.

The order, and when loading happens (Keras 3.15.1's source, checked by tests/test_keras.py in
the three environments, 0 and 2 workers, one device and data parallel):
- fit makes a new iterator of the PyDataset for each epoch (EpochIterator, steps_per_epoch
  None) and starts it at the epoch's first batch, after on_epoch_begin has set the order; the
  enqueuer starts there too (PyDatasetAdapter.on_epoch_begin), and makes its process pool then.
  So no batch of an epoch loads before clock.start(), and each epoch's worker start-up is
  inside its clock: Keras keeps no workers across epochs (PyTorch's persistent ones are
  started in build). The enqueuer's stop at the epoch's end also waits 0.1 s on its empty queue
  (PyDatasetEnqueuer.stop), inside the clock.
- The enqueuer submits exactly len(PyDataset) batches and stops after the last: nothing loads
  across an epoch's end. On TensorFlow the iterator Keras makes at an epoch's end for the next
  epoch is replaced at the next epoch's start, before it is read.
- Before the first epoch fit builds what is still unbuilt from one batch that it reads
  (Trainer._symbolic_build; on TensorFlow under a tf.distribute strategy always,
  TensorFlowTrainer._maybe_symbolic_build). Its iterator may load more (tf.data's prefetch, the
  enqueuer's queue), outside any clock, and PyDatasetEnqueuer.stop keeps the enqueuer's loaded
  batches "for the next run": they would be served first in epoch 1, batches of no epoch's
  order (the test sees this without the two measures here). So `FitMethods.compile` builds
  the compiled loss and the optimizer beforehand, after which JAX, torch, and TensorFlow with
  Keras' default strategy read no batch before epoch 1; and `ClockCallback.on_train_begin`
  empties the enqueuer's ready queue (`drop_queued_batches`), for the TensorFlow strategies.
- Whatever fit reads before the first epoch (those reads; on TensorFlow the first two items,
  from which from_generator's signature is taken, PyDatasetAdapter.get_tf_dataset) comes
  from a stand-in order, the first global batch's indices, loaded as epoch 0.
"""
import contextlib
import dataclasses
import functools
import gc
import importlib
import os
import queue

import numpy as np

from dlbench.frameworks import FRAMEWORKS, backend_module
from dlbench.protocol import FrameworkError, NotApplicable

# framework (keras-<backend>, dlbench.frameworks) -> the Keras backend it runs on, and that
# backend -> the benchmark's backend module of its engine (placement, threads, sync)
KERAS_BACKENDS = {name: name.removeprefix("keras-") for name, framework in FRAMEWORKS.items()
                  if framework.module == "keras"}
ENGINE_MODULES = {KERAS_BACKENDS[name]: backend_module(framework.engine) for name, framework in FRAMEWORKS.items()
                  if framework.module == "keras"}
# Keras backend -> strategy -> the engine module's name for the same placement
STRATEGIES = {"tensorflow": {"single": "single", "mirrored": "mirrored"},
              "jax": {"single": "single", "data-parallel": "sharding"},
              "torch": {"single": "single"}}
NO_TORCH_DISTRIBUTION = ("keras.distribution runs on the JAX backend (and TensorFlow's) only in Keras 3.15.1, not "
                         "on torch; model.fit on the torch backend trains on one device")


def keras_backend_of(framework):
    if framework not in KERAS_BACKENDS:
        raise ValueError(f"{framework!r} is not a Keras framework ({', '.join(KERAS_BACKENDS)})")
    return KERAS_BACKENDS[framework]


def check_backend(spec):
    """The Keras backend of this interpreter, which must be the one spec.framework names."""
    import keras

    expected, actual = keras_backend_of(spec.framework), keras.backend.backend()
    if actual != expected:
        raise FrameworkError(
            f"{spec.framework} runs Keras on its {expected} backend, but this interpreter's Keras runs on {actual} "
            f"(KERAS_BACKEND={os.environ.get('KERAS_BACKEND')!r}): run it with the interpreter of "
            f"envs/{spec.framework}.yaml, which sets KERAS_BACKEND={expected}")
    return actual


def engine(name=None):
    """The engine's backend module, of the Keras backend `name` (default: this interpreter's)."""
    if name is None:
        import keras

        name = keras.backend.backend()
    return importlib.import_module(ENGINE_MODULES[name])


def engine_spec(spec):
    """The spec as the engine's backend module reads it (its own strategy names)."""
    strategies = STRATEGIES[keras_backend_of(spec.framework)]
    return dataclasses.replace(spec, strategy=strategies.get(spec.strategy, spec.strategy))


# --- the backend contract ----------------------------------------------------------------------------

def configure(spec):
    """Before Keras and its engine start: the engine's own settings (JAX's CPU device count and
    threads), Keras' torch device when the run is on the CPU; then the backend check."""
    name = keras_backend_of(spec.framework)
    if name == "torch" and spec.device == "cpu":
        os.environ["KERAS_TORCH_DEVICE"] = "cpu"  # read once, when Keras is imported
    module = engine(name)
    if hasattr(module, "configure"):
        module.configure(engine_spec(spec))
    check_backend(spec)


def version():
    import keras

    return keras.__version__


def visible_gpus():
    return engine().visible_gpus()


def check(spec, device_kind):
    name = check_backend(spec)
    if spec.devices > 1 and name == "torch":
        raise NotApplicable(NO_TORCH_DISTRIBUTION)
    if spec.strategy not in STRATEGIES[name]:
        raise ValueError(f"unknown {spec.framework} strategy {spec.strategy!r}, expected one of "
                         f"{tuple(STRATEGIES[name])}")
    if (spec.strategy == "single") != (spec.devices == 1):
        raise ValueError(f"the single strategy runs on one device, {spec.strategy} on more ({spec.devices} asked for)")


def launch(spec, target, args):
    """One process: Keras' data parallelism drives every device from it."""
    target(0, *args)


def setup(spec, device_kind, rank):
    name = check_backend(spec)
    placement = engine(name).setup(engine_spec(spec), device_kind, rank)
    placement.handles.update(keras_backend=name, keras_strategy=spec.strategy)
    if spec.strategy == "data-parallel":
        import keras

        devices = keras.distribution.list_devices(device_kind)
        if len(devices) < spec.devices:
            raise FrameworkError(f"keras-jax sees {len(devices)} {device_kind} device(s), the run asks for "
                                 f"{spec.devices}: the JAX backend's configure sets the CPU device count")
        keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices[:spec.devices]))
    return placement


def scope(placement):
    """Where the model and its optimizer are made: the MirroredStrategy's scope (keras-tensorflow
    mirrored), else nothing (Keras' default strategy; keras-jax's distribution is global)."""
    if placement.handles.get("keras_strategy") == "mirrored":
        return placement.handles["strategy"].scope()
    return contextlib.nullcontext()


def replicas(placement):
    return placement.local_devices


def barrier(placement):
    engine(placement.handles["keras_backend"]).barrier(placement)


def sync(placement, pending):
    engine(placement.handles["keras_backend"]).sync(placement, pending)


def to_float(value):
    return float(value)  # fit's logs are already numbers on the host


def mean_over_processes(value, placement):
    return value  # one process


def gpu_allocator_peak(placement):
    return engine(placement.handles["keras_backend"]).gpu_allocator_peak(placement)


def describe(placement):
    import keras

    name = placement.handles["keras_backend"]
    module = engine(name)
    return {**module.describe(placement), "keras": keras.__version__, "keras_backend": name,
            "keras_backend_version": module.version(), "strategy": placement.handles["keras_strategy"]}


def flushes_denormals():
    """Keras' ops run in its engine's kernels: the engine's probe."""
    return engine().flushes_denormals()


def teardown(placement):
    engine(placement.handles["keras_backend"]).teardown(placement)


# --- what the workload modules share -------------------------------------------------------------

@functools.cache
def _keras_classes():
    """The classes that subclass Keras' own, made at first use (Keras is imported after configure)."""
    import keras

    class EpochBatches(keras.utils.PyDataset):
        """Item i: batch i of the epoch's order, load(epoch, indices) in this process or in one
        of Keras' `workers` worker processes.

        Before the first set_order (what fit reads before its first epoch: see the module's
        docstring), every item is a stand-in: the batch of the first global batch's indices,
        loaded as epoch 0."""

        def __init__(self, load, n_batches, batch, workers):
            super().__init__(workers=workers, use_multiprocessing=workers > 0)
            self.load, self.n_batches = load, n_batches
            self.epoch, self.order = 0, np.arange(batch).reshape(1, batch)  # the stand-in

        def set_order(self, epoch, order):
            if len(order) != self.n_batches:
                raise ValueError(f"an epoch of {len(order)} batches, the PyDataset has {self.n_batches}")
            self.epoch, self.order = epoch, order

        def __len__(self):
            return self.n_batches

        def __getitem__(self, index):
            return self.load(self.epoch, self.order[index if self.epoch else 0])

    class ClockCallback(keras.callbacks.Callback):
        """Drives the protocol's EpochClock from fit's per-epoch hooks (see the module's docstring)."""

        def __init__(self, workload, clock):
            super().__init__()
            self.workload, self.clock = workload, clock
            self.iterations = None

        def _iterations(self):
            return int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))

        def on_train_begin(self, logs=None):
            drop_queued_batches(self.workload.train_data)

        def on_epoch_begin(self, epoch, logs=None):
            order = self.clock.begin(epoch + 1)  # Keras counts epochs from 0
            self.workload.begin_epoch(epoch + 1, order, self.clock.info)
            self.iterations = self._iterations()
            self.clock.start()

        def on_epoch_end(self, epoch, logs=None):
            steps = self._iterations() - self.iterations
            loss = (logs or {}).get("loss")
            self.clock.stop(steps, None if loss is None else float(loss) * steps, self.workload.pending())

    return {"EpochBatches": EpochBatches, "ClockCallback": ClockCallback}


def drop_queued_batches(dataset):
    """Empty the ready queue of Keras' enqueuer of `dataset`: the batches it loaded for fit's
    read before the first epoch, which PyDatasetEnqueuer.stop keeps "for the next run" and its
    get() would serve first in epoch 1 (Keras 3.15.1; see the module's docstring). fit makes the
    enqueuer and keeps it to itself: it is found among the objects the garbage collector tracks."""
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


def epoch_batches(load, n_batches, batch, workers):
    """A keras.utils.PyDataset of the epoch's order (EpochBatches); load(epoch, indices) -> a batch."""
    return _keras_classes()["EpochBatches"](load, n_batches, batch, workers)


def clock_callback(workload, clock):
    return _keras_classes()["ClockCallback"](workload, clock)


def fit_epoch_iterator(dataset):
    """The iterator that model.fit makes of a PyDataset on this backend (keras/src/backend/
    <backend>/trainer.py: TFEpochIterator under the current tf.distribute strategy,
    JAXEpochIterator, TorchEpochIterator), for a loop that reads the batches as fit does
    without a model (the loader benchmark). Keras' private API, of the pinned Keras 3.15.1."""
    import keras

    name = keras.backend.backend()
    if name == "tensorflow":
        import tensorflow as tf
        from keras.src.backend.tensorflow.trainer import TFEpochIterator

        iterator = TFEpochIterator(x=dataset, shuffle=False, distribute_strategy=tf.distribute.get_strategy())
    elif name == "jax":
        from keras.src.backend.jax.trainer import JAXEpochIterator

        iterator = JAXEpochIterator(x=dataset, shuffle=False)
    else:
        from keras.src.backend.torch.trainer import TorchEpochIterator

        iterator = TorchEpochIterator(x=dataset, shuffle=False)
    iterator.reset()  # as fit does before its first epoch
    return iterator


def epoch_of(epoch_iterator):
    """One epoch of a fit_epoch_iterator, batch by batch, as fit's train function receives them
    (torch: a list of the step's batches; TensorFlow and JAX: the iterator it reads one from)."""
    for _, _, data in epoch_iterator:
        if isinstance(data, list):
            yield from data
        else:
            yield next(data)


class FitMethods:
    """What every Keras workload module does the same way with its self.model: compile, fit with
    the clock's callback over self.train_data (an EpochBatches), predictions, the parameter count.

    The workload sets self.inputs_to_keras (numpy inputs in PyTorch's layout -> the model's)."""

    def compile(self, loss, learning_rate, labels, outputs):
        """Adam from the spec; then everything fit would otherwise build from a batch of the
        PyDataset (see the module's docstring): the compiled loss, from one sample's `labels`
        and `outputs` (numpy, of a batch of 1), and the optimizer's variables."""
        import keras

        opt = self.spec.optimizer
        with scope(self.placement):
            self.model.compile(optimizer=keras.optimizers.Adam(learning_rate=learning_rate, beta_1=opt.beta1,
                                                               beta_2=opt.beta2, epsilon=opt.eps), loss=loss)
            self.model.compute_loss(y=labels, y_pred=outputs)
            self.model.optimizer.build(self.model.trainable_variables)

    def fit(self, clock):
        self.model.fit(self.train_data, epochs=self.spec.epochs, shuffle=False, verbose=0,
                       callbacks=[clock_callback(self, clock)])

    def begin_epoch(self, epoch, order, info):
        """Before the epoch's first batch: its order on the PyDataset, its info applied."""
        self.train_data.set_order(epoch, order)
        if "lr" in info:
            self.model.optimizer.learning_rate = info["lr"]

    def pending(self):
        """What the engine's sync waits on: JAX's trainable values; the others sync by themselves."""
        if self.placement.handles["keras_backend"] == "jax":
            return [v.value for v in self.model.trainable_variables]
        return None

    def predict(self, inputs):
        """Numpy inputs in PyTorch's layout -> numpy outputs, in inference mode (predict_on_batch:
        compiled as fit's step is). A batch that the replicas do not divide is padded."""
        inputs = self.inputs_to_keras(inputs)
        pad = -len(inputs) % replicas(self.placement)
        if pad:
            inputs = np.concatenate([inputs, np.repeat(inputs[-1:], pad, axis=0)])
        if self.placement.handles.get("keras_strategy") == "mirrored":
            # predict_on_batch under a tf.distribute strategy runs the whole batch on every
            # replica and concatenates (N times the outputs); predict splits it.
            outputs = self.model.predict(inputs, batch_size=len(inputs), verbose=0)
        else:
            outputs = self.model.predict_on_batch(inputs)
        return np.asarray(outputs)[:len(inputs) - pad]

    def parameter_count(self):
        return sum(int(np.prod(w.shape)) for w in self.model.trainable_weights)
