"""TensorFlow's step: one strategy.run per batch (`make_train_step`) in the run's execution mode
(`WorkloadMethods.make_step`), Adam, the precision policy (Keras' dtype policies, `dtype_policy`),
and what every TensorFlow workload module's step does the same way."""
import contextlib

import keras
import numpy as np
import tensorflow as tf

from dlbench import precision
from dlbench.errors import NotApplicable
from dlbench.frameworks.tensorflow import forward_ops, strategy

# Keras' mixed precision policies: float32 variables, the layers' compute in 16 bits
KERAS_POLICIES = {"float32": "float32", "mixed-bfloat16": "mixed_bfloat16", "mixed-float16": "mixed_float16"}


@contextlib.contextmanager
def dtype_policy(policy):
    """Keras' global dtype policy of `policy` (dlbench.precision; None, a run without a precision:
    float32) while the model's layers are made (each layer takes it when constructed), the
    previous policy again after."""
    before = keras.config.dtype_policy()
    keras.config.set_dtype_policy(KERAS_POLICIES[policy or precision.DEFAULT])
    try:
        yield
    finally:
        keras.config.set_dtype_policy(before)


def make_train_step(placement, replica_step, mode):
    """One batch (per replica, from `distribute`): strategy.run(replica_step) and the mean loss of
    this process's batch, on the device (no cross-worker reduction per step; the protocol reduces
    the block's sum once, outside the clock): a tf.function (traced once: fixed batch shapes),
    but in the eager mode the same function run op by op from Python.

    replica_step(*batch) returns a Keras loss, which Keras scales by 1/replicas under
    tf.distribute (so that the gradients summed over replicas are the global batch's mean):
    the process's mean is the sum of its replicas' losses times replicas / local replicas.
    """
    dist = strategy(placement)

    def train_step(batch):
        losses = dist.experimental_local_results(dist.run(replica_step, args=batch))
        return tf.add_n(losses) * (dist.num_replicas_in_sync / len(losses))

    return train_step if mode == "eager" else tf.function(train_step, reduce_retracing=True)


def make_adam(spec, learning_rate, policy):
    """Adam; under mixed-float16 in Keras' LossScaleOptimizer (dynamic loss scaling: the step scales
    the loss by optimizer.scale_loss, its apply unscales the gradients and skips non-finite ones)."""
    opt = spec.optimizer
    adam = keras.optimizers.Adam(learning_rate=learning_rate, beta_1=opt.beta1, beta_2=opt.beta2, epsilon=opt.eps)
    return keras.optimizers.LossScaleOptimizer(adam) if policy == "mixed-float16" else adam


class WorkloadMethods:
    """What every TensorFlow workload module does the same way: one replica's step with a
    GradientTape (self.model, self.loss_fn, self.optimizer) in the run's mode (`make_step`),
    its per-batch call (self.step), the parameter count, and the precision record's forward pass
    (the module's model_inputs(inputs): predict's inputs as the model takes them)."""

    def gradients(self, inputs, labels):
        with tf.GradientTape() as tape:
            loss = self.loss_fn(labels, tf.cast(self.model(inputs, training=True), tf.float32))
            scaled = self.optimizer.scale_loss(loss)  # a LossScaleOptimizer's; Adam's is the loss itself
        return loss, tape.gradient(scaled, self.model.trainable_variables)

    def precision_ops(self, inputs):
        """The compute ops of the model's forward pass in TensorFlow's graph, and whether the loss is scaled."""
        ops = forward_ops(lambda x: self.model(x, training=False), self.model_inputs(inputs))
        return ops, isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer)

    def make_step(self):
        """The training step in the run's mode (dlbench.frameworks: TensorFlow's modes): graph, a
        tf.function; eager, the same step op by op; xla, the tf.function with each replica's
        forward and backward pass compiled by XLA (jit_compile; XLA's CPU backend needs nothing
        extra). Not the whole step, as a single-device tf.function(jit_compile=True) would: an
        XLA cluster runs on one device, and a MirroredStrategy step (its variables on each
        device, the gradients' cross-replica sum) does not compile ("Trying to access resource
        ... located in device CPU:1 from device CPU:0", TF's known issue), so Adam's update and
        the gradients' all-reduce stay in the graph, in every strategy alike; recompute, the graph
        step with the activations of each DenseNet dense layer's bottleneck recomputed in the
        backward pass (tf.recompute_grad, in the ChestX-ray module's `gradients`). Only training
        has a mode: evaluation's inference is a tf.function in every mode.

        A layer that Keras marks as without XLA support (supports_jit: the LSTM on a GPU runs
        cuDNN's kernel, which XLA does not compile) makes xla not applicable, as Keras' own
        jit_compile turns itself off for it."""
        if self.spec.mode not in ("graph", "eager", "xla", "recompute"):
            raise ValueError(f"unknown TensorFlow mode {self.spec.mode!r}")
        unsupported = [layer.name for layer in self.model.layers if not layer.supports_jit]
        if self.spec.mode == "xla" and unsupported:
            raise NotApplicable(f"mode xla: Keras {keras.__version__} marks the layers {unsupported} as without XLA "
                                f"support here (supports_jit)")
        gradients = tf.function(self.gradients, jit_compile=True) if self.spec.mode == "xla" else self.gradients

        def replica_step(inputs, labels):
            loss, grads = gradients(inputs, labels)
            self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
            return loss

        return make_train_step(self.placement, replica_step, self.spec.mode)

    def train_step(self, batch):
        return self.step(batch)

    def parameter_count(self):
        return sum(int(np.prod(w.shape)) for w in self.model.trainable_weights)
