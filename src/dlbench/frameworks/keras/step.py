"""Keras' training loop under the protocol's clock: what every Keras workload module shares
(`WorkloadMethods`, the part of a dlbench.contract.OwnLoop that is the same in each).

Training is Keras' own loop: model.compile(Adam, the loss, jit_compile from the run's mode: jit
compiles fit's step, XLA on TensorFlow and JAX, torch.compile on torch; no-jit runs it as a
tf.function on TensorFlow, op by op on JAX and torch; the defaults are Keras' own "auto" on these
machines), then model.fit with
shuffle=False and verbose=0, one fit epoch per block of the protocol (steps_per_epoch = the
block's steps): `ClockCallback` starts the RunClock in on_epoch_begin and stops it in
on_epoch_end with the steps Keras ran (optimizer.iterations after minus before), the block's
mean loss from fit's logs times the steps, and (JAX) the trainable variables' values to block
on; when the next block has another length (calibration) it stops fit, and `WorkloadMethods.fit`
calls fit again from the run's next step. With steps_per_epoch set, Keras' EpochIterator keeps
its iterator across fit epochs (keras/src/trainers/epoch_iterator.py): the warm-up and steady
units of one length run over one iterator. No per-batch hooks: they would turn off Keras'
asynchronous batch-end dispatch. The learning rate follows the task's schedule by the run's
step, as a LearningRateSchedule of the optimizer's iterations (`RunSchedule`).

What fit reads before the first block (checked by tests/test_keras.py in the three
environments, 0 and 2 workers, one device and data parallel): `WorkloadMethods.compile` builds the
compiled loss and the optimizer beforehand, so JAX, torch, and TensorFlow with Keras' default
strategy read no batch before it (keras-tensorflow reads one, once, for its pipeline's shapes).
Under a tf.distribute strategy TensorFlow's trainer always builds from a batch it reads
(TensorFlowTrainer._maybe_symbolic_build), with its iterator's read-ahead, outside any clock
and never trained on; `ClockCallback.on_train_begin` empties the enqueuer's ready queue
(`internals.drop_queued_batches`: Keras' private API, in internals.py), which
PyDatasetEnqueuer.stop keeps "for the next run".

Precision: the model is built under the policy's Keras dtype policy (the workload modules, in
dlbench.frameworks.keras.dtype_policy); mixed-float16 compiles Adam wrapped in a
keras.optimizers.LossScaleOptimizer (dynamic loss scaling, Keras' defaults), explicitly: Keras'
compile would wrap it by itself for a mixed_float16 model (auto_scale_loss), which is turned off
so that the wrapping is this code's alone. `WorkloadMethods.precision_ops` is the proof: the
engine adapter's forward_ops of one forward pass.
"""
import functools

import numpy as np

from dlbench import precision
from dlbench.errors import NotApplicable
from dlbench.frameworks.keras import engine, replicas, scope
from dlbench.frameworks.keras.loaders import fit_input


@functools.cache
def _fit_classes():
    """The classes that subclass Keras' own, made at first use (Keras is imported after configure)."""
    import keras

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
            if isinstance(self.model.optimizer, keras.optimizers.LossScaleOptimizer):
                # its iterations count the applied steps only: a step whose scaled gradients
                # overflowed is skipped (the scale halved), and fit ran it: its steps per epoch
                steps = self.params["steps"]
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

    return {"ClockCallback": ClockCallback, "RunSchedule": RunSchedule}


def clock_callback(workload, clock):
    return _fit_classes()["ClockCallback"](workload, clock)


class WorkloadMethods:
    """What every Keras workload module does the same way with its self.model: compile, fit with
    the clock's callback over self.train_data (a RunBatches), predictions, the parameter count.

    The workload sets self.inputs_to_keras (numpy inputs in PyTorch's layout -> the model's)."""

    def compile(self, loss, learning_rate, labels, outputs):
        """Adam from the spec; then everything fit would otherwise build from a batch of the
        PyDataset (see the module's docstring): the compiled loss, from one sample's `labels`
        and `outputs` (numpy, of a batch of 1), and the optimizer's variables. The learning
        rate is a constant, or the task's schedule by the run's step (set in fit).

        jit_compile is the run's mode, never Keras' "auto"; Keras may still turn it off (a layer
        without XLA support, such as the LSTM on cuDNN, or TF's op determinism): the record says
        what Keras resolved (describe's jit_compile), and a jit run that Keras turned off is not
        applicable. Predictions (predict_on_batch) follow the same setting, as in Keras."""
        import keras

        opt = self.spec.optimizer
        jit = {"jit": True, "no-jit": False}[self.spec.mode]
        with scope(self.placement):
            optimizer = keras.optimizers.Adam(learning_rate=learning_rate, beta_1=opt.beta1, beta_2=opt.beta2,
                                              epsilon=opt.eps)
            if precision.LOSS_SCALING[self.applied_precision]:
                optimizer = keras.optimizers.LossScaleOptimizer(optimizer)  # dynamic loss scaling
            self.model.compile(optimizer=optimizer, loss=loss, jit_compile=jit, auto_scale_loss=False)
            self.model.compute_loss(y=labels, y_pred=outputs)
            self.model.optimizer.build(self.model.trainable_variables)
        self.placement.handles["jit_compile"] = self.model.jit_compile
        if self.model.jit_compile != jit:
            raise NotApplicable(f"mode {self.spec.mode}: Keras {keras.__version__} turns jit_compile off for this "
                                f"model on {keras.backend.backend()} (a layer without XLA support)")

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
            self.model.optimizer.learning_rate = _fit_classes()["RunSchedule"](np.asarray(rates, np.float32))
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
        compiled as fit's step is; across nodes `_predict_alone`). A batch that the replicas do
        not divide is padded."""
        inputs = self.inputs_to_keras(inputs)
        pad = -len(inputs) % replicas(self.placement)
        if pad:
            inputs = np.concatenate([inputs, np.repeat(inputs[-1:], pad, axis=0)])
        if self.placement.processes > 1:
            outputs = self._predict_alone(inputs)
        elif self.placement.handles.get("keras_strategy") == "mirrored":
            # predict_on_batch under a tf.distribute strategy runs the whole batch on every
            # replica and concatenates (N times the outputs); predict splits it.
            outputs = self.model.predict(inputs, batch_size=len(inputs), verbose=0)
        else:
            outputs = self.model.predict_on_batch(inputs)
        return np.asarray(outputs)[:len(inputs) - pad]

    def _predict_alone(self, inputs):
        """keras-jax across nodes: process 0 evaluates while the others wait (the protocol), and
        predict_on_batch would be a computation of every process (the variables and the
        distributed batch span the global mesh). The model's stateless_call, compiled, on this
        process's replica of the variables and its own devices instead (the JAX adapter's
        local_replica)."""
        import jax

        if getattr(self, "_stateless_predict", None) is None:
            self._stateless_predict = jax.jit(self._stateless_forward)
        return self._stateless_predict(*self._local_variables(),
                                       jax.device_put(inputs, self.placement.handles["local_batch"]))

    def _stateless_forward(self, trainable, non_trainable, x):
        """keras-jax: the model's inference pass as a function of its variables' values."""
        return self.model.stateless_call(trainable, non_trainable, x, training=False)[0]

    def _local_variables(self):
        """keras-jax: this process's replica of the trainable and non-trainable values (the JAX
        adapter's local_replica; as they are in one process)."""
        # the engine by name: keras-jax's runs depend on the JAX backend, the other Keras backends' do not
        return engine("jax").local_replica(([v.value for v in self.model.trainable_variables],
                                            [v.value for v in self.model.non_trainable_variables]), self.placement)

    def precision_ops(self, inputs):
        """The compute ops of one inference pass on `inputs` (numpy, as predict takes them) as the
        engine ran it, its adapter's forward_ops (dlbench.precision), and whether the loss is
        scaled (the compiled optimizer is a LossScaleOptimizer). keras-jax compiles the model's
        stateless call on this process's replica of the variables, as `_predict_alone` does
        (process 0 measures alone); the others trace or dispatch model(x) as it is."""
        import keras

        name, inputs = self.placement.handles["keras_backend"], self.inputs_to_keras(inputs)
        if name == "jax":
            ops = engine(name).forward_ops(self._stateless_forward, *self._local_variables(), inputs)
        else:
            ops = engine(name).forward_ops(lambda x: self.model(x, training=False), inputs)
        return ops, isinstance(self.model.optimizer, keras.optimizers.LossScaleOptimizer)

    def parameter_count(self):
        return sum(int(np.prod(w.shape)) for w in self.model.trainable_weights)
