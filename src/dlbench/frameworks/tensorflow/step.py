"""TensorFlow's step: a tf.function of one strategy.run per batch (`make_train_step`), Adam, and
what every TensorFlow workload module's step does the same way (`WorkloadMethods`)."""
import keras
import numpy as np
import tensorflow as tf

from dlbench.frameworks.tensorflow import strategy


def make_train_step(placement, replica_step):
    """A tf.function of one batch (per replica, from `distribute`): strategy.run(replica_step)
    and the mean loss of this process's batch, on the device (no cross-worker reduction per
    step; the protocol reduces the block's sum once, outside the clock).

    replica_step(*batch) returns a Keras loss, which Keras scales by 1/replicas under
    tf.distribute (so that the gradients summed over replicas are the global batch's mean):
    the process's mean is the sum of its replicas' losses times replicas / local replicas.
    Fixed batch shapes: traced once.
    """
    dist = strategy(placement)

    @tf.function(reduce_retracing=True)
    def train_step(batch):
        losses = dist.experimental_local_results(dist.run(replica_step, args=batch))
        return tf.add_n(losses) * (dist.num_replicas_in_sync / len(losses))

    return train_step


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
