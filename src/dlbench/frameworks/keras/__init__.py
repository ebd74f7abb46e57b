"""Keras 3's backend, one module for the frameworks keras-tensorflow, keras-jax and keras-torch
(the contract: dlbench.contract), and what the Keras workload modules share: the PyDataset of
the run's order, the callback that drives the protocol's clock, model.fit, predictions.

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
slices, replica r taking slice r, as dlbench.contract.shard does.

Training is Keras' own loop: model.compile(Adam, the loss, jit_compile left to Keras' default
per backend: XLA on JAX, not on TensorFlow on a CPU nor on torch), then model.fit with
shuffle=False and verbose=0, one fit epoch per block of the protocol (steps_per_epoch = the
block's steps): `ClockCallback` starts the RunClock in on_epoch_begin and stops it in
on_epoch_end with the steps Keras ran (optimizer.iterations after minus before), the block's
mean loss from fit's logs times the steps, and (JAX) the trainable variables' values to block
on; when the next block has another length (calibration) it stops fit, and `FitMethods.fit`
calls fit again from the run's next step. With steps_per_epoch set, Keras' EpochIterator keeps
its iterator across fit epochs (keras/src/trainers/epoch_iterator.py): the warm-up and steady
units of one length run over one iterator. No per-batch hooks: they would turn off Keras'
asynchronous batch-end dispatch. The learning rate follows the task's schedule by the run's
step, as a LearningRateSchedule of the optimizer's iterations (`RunSchedule`).

Loading: a `RunBatches` PyDataset whose item i is the batch of the run's step offset + i,
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

What fit reads before the first block (checked by tests/test_keras.py in the three
environments, 0 and 2 workers, one device and data parallel): `FitMethods.compile` builds the
compiled loss and the optimizer beforehand, so JAX, torch, and TensorFlow with Keras' default
strategy read no batch before it (keras-tensorflow reads one, once, for its pipeline's shapes).
Under a tf.distribute strategy TensorFlow's trainer always builds from a batch it reads
(TensorFlowTrainer._maybe_symbolic_build), with its iterator's read-ahead, outside any clock
and never trained on; `ClockCallback.on_train_begin` empties the enqueuer's ready queue
(`internals.drop_queued_batches`: Keras' private API, in internals.py), which
PyDatasetEnqueuer.stop keeps "for the next run".
"""
import contextlib
import dataclasses
import functools
import importlib
import os

import numpy as np

from dlbench.frameworks import FRAMEWORKS, backend_module
from dlbench.contract import FrameworkError, NotApplicable

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

    class RunBatches(keras.utils.PyDataset):
        """Item i: the batch of the run's step `offset` + i, load(its epoch, its indices), in this
        process or in one of Keras' `workers` worker processes. Before set_run (what fit may read
        before its first epoch: see the module's docstring) every item is a stand-in, the batch of
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

    class ClockCallback(keras.callbacks.Callback):
        """Drives the protocol's RunClock from fit's per-epoch hooks: one fit epoch, one block."""

        def __init__(self, workload, clock):
            super().__init__()
            self.workload, self.clock = workload, clock
            self.iterations = None

        def _iterations(self):
            return int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))

        def on_train_begin(self, logs=None):
            from dlbench.frameworks.keras import internals

            internals.drop_queued_batches(self.workload.train_data)

        def on_epoch_begin(self, epoch, logs=None):
            self.iterations = self._iterations()
            self.clock.start()

        def on_epoch_end(self, epoch, logs=None):
            steps = self._iterations() - self.iterations
            loss = (logs or {}).get("loss")
            self.clock.stop(steps, None if loss is None else float(loss) * steps, self.workload.pending())
            upcoming = self.clock.upcoming()
            if upcoming is None or upcoming.steps != steps:
                self.model.stop_training = True  # fit again with the next length (or the run is done)

    class RunSchedule(keras.optimizers.schedules.LearningRateSchedule):
        """The learning rate of the run's step (the optimizer's iterations), by its epoch: the
        task's epoch_info as a table looked up in the step, Keras' idiom for a schedule."""

        def __init__(self, rates):
            super().__init__()
            self.rates = rates

        def __call__(self, step):
            index = keras.ops.minimum(keras.ops.cast(step, "int32"), len(self.rates) - 1)
            return keras.ops.take(keras.ops.convert_to_tensor(self.rates), index)

        def get_config(self):
            return {"rates": [float(r) for r in self.rates]}

    return {"RunBatches": RunBatches, "ClockCallback": ClockCallback, "RunSchedule": RunSchedule}


def run_batches(load, batch, workers):
    """A keras.utils.PyDataset of the run's order (RunBatches); load(epoch, indices) -> a batch."""
    return _keras_classes()["RunBatches"](load, batch, workers)


def clock_callback(workload, clock):
    return _keras_classes()["ClockCallback"](workload, clock)


def tf_pipeline(dataset):
    """keras-tensorflow's input: a tf.data pipeline over the same items as the PyDataset
    `dataset` (from its offset on), each batch loaded by the same load(epoch, indices) through
    tf.numpy_function, `workers` parallel calls and as many prefetched (none with 0 workers), as
    the TensorFlow modules' loaders do. Keras would read a PyDataset through
    tf.data.Dataset.from_generator, which sets glibc's M_TRIM_THRESHOLD for the whole process
    (the TensorFlow backend's comments): with it the two TensorFlow frameworks' input paths
    would differ in the allocator, not in Keras."""
    import tensorflow as tf

    from dlbench.frameworks.tensorflow import loader_options

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


class FitMethods:
    """What every Keras workload module does the same way with its self.model: compile, fit with
    the clock's callback over self.train_data (a RunBatches), predictions, the parameter count.

    The workload sets self.inputs_to_keras (numpy inputs in PyTorch's layout -> the model's)."""

    def compile(self, loss, learning_rate, labels, outputs):
        """Adam from the spec; then everything fit would otherwise build from a batch of the
        PyDataset (see the module's docstring): the compiled loss, from one sample's `labels`
        and `outputs` (numpy, of a batch of 1), and the optimizer's variables. The learning
        rate is a constant, or the task's schedule by the run's step (set in fit)."""
        import keras

        opt = self.spec.optimizer
        with scope(self.placement):
            self.model.compile(optimizer=keras.optimizers.Adam(learning_rate=learning_rate, beta_1=opt.beta1,
                                                               beta_2=opt.beta2, epsilon=opt.eps), loss=loss)
            self.model.compute_loss(y=labels, y_pred=outputs)
            self.model.optimizer.build(self.model.trainable_variables)

    def fit(self, clock):
        """One model.fit per length of block: fit epoch k is the clock's block k. The steady units
        (and the warm-up units of their length) run in one fit, over one iterator; a new length
        (calibration) stops fit and starts another at the run's next step. Keras' worker
        processes (a PyDataset with workers) are stopped at every fit epoch's end and started
        again at the next one's, and do not resume where they were: there each block is a fit
        of its own, over a new iterator from the block's first step (Keras keeps no workers
        across epochs; their start is inside each block's clock, as in any fit epoch)."""
        self.train_data.set_run(clock.order, clock.epochs)
        rates = [clock.learning_rate(step) for step in range(len(clock.order))]
        if rates[0] is not None:  # the task's schedule (IMDB), by the run's step
            self.model.optimizer.learning_rate = _keras_classes()["RunSchedule"](np.asarray(rates, np.float32))
        callback = clock_callback(self, clock)
        block_per_fit = self.placement.handles["keras_backend"] != "tensorflow" and self.train_data.workers > 0
        while (block := clock.upcoming()) is not None:
            self.train_data.offset = clock.steps_done
            self.model.fit(fit_input(self), epochs=1 if block_per_fit else len(clock.order),
                           steps_per_epoch=block.steps, shuffle=False, verbose=0, callbacks=[callback])

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
