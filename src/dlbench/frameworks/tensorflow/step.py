"""TensorFlow's step: one strategy.run per batch, in the run's execution mode (`make_train_step`),
Adam, and what every TensorFlow workload module's step does the same way (`WorkloadMethods`)."""
import keras
import numpy as np
import tensorflow as tf

from dlbench.frameworks.tensorflow import strategy


# TensorFlow's execution modes (dlbench.frameworks): the same Python step as a tf.function (a
# graph traced once), run op by op from Python, or a tf.function that XLA compiles whole
# (jit_compile: XLA's CPU backend needs nothing extra).
MODES = {"graph": {}, "eager": None, "xla": {"jit_compile": True}}


def make_train_step(placement, replica_step, mode):
    """One batch (per replica, from `distribute`): strategy.run(replica_step) and the mean loss of
    this process's batch, on the device (no cross-worker reduction per step; the protocol reduces
    the block's sum once, outside the clock), as the `mode` runs it (MODES). Only the training
    step has a mode: evaluation's inference stays a tf.function in every mode.

    replica_step(*batch) returns a Keras loss, which Keras scales by 1/replicas under
    tf.distribute (so that the gradients summed over replicas are the global batch's mean):
    the process's mean is the sum of its replicas' losses times replicas / local replicas.
    Fixed batch shapes: traced (and in xla compiled) once.
    """
    if mode not in MODES:
        raise ValueError(f"unknown TensorFlow mode {mode!r}, expected one of {tuple(MODES)}")
    dist = strategy(placement)

    def train_step(batch):
        losses = dist.experimental_local_results(dist.run(replica_step, args=batch))
        return tf.add_n(losses) * (dist.num_replicas_in_sync / len(losses))

    if MODES[mode] is None:
        return train_step
    return tf.function(train_step, reduce_retracing=True, **MODES[mode])


def make_adam(spec, learning_rate):
    opt = spec.optimizer
    return keras.optimizers.Adam(learning_rate=learning_rate, beta_1=opt.beta1, beta_2=opt.beta2, epsilon=opt.eps)


class WorkloadMethods:
    """What every TensorFlow workload module does the same way: one replica's step with a
    GradientTape (self.model, self.loss_fn, self.optimizer), the per-batch call of the step
    compiled by make_train_step (self.step), and the parameter count."""

    def replica_step(self, inputs, labels):
        with tf.GradientTape() as tape:
            loss = self.loss_fn(labels, self.model(inputs, training=True))
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        return loss

    def train_step(self, batch):
        return self.step(batch)

    def parameter_count(self):
        return sum(int(np.prod(w.shape)) for w in self.model.trainable_weights)
