"""MNIST CNNs in TensorFlow/Keras 3: one device (OneDeviceStrategy), MirroredStrategy,
MultiWorkerMirroredStrategy.

The training data lives in host memory as tensors; each batch is one tf.gather in a tf.data
pipeline per replica (dlbench.frameworks.tensorflow.distribute), with no loader threads or
prefetch: it loads when the step asks for it. One step per batch (a tf.function in the default mode, graph)
(strategy.run), called from the harness's loop, as Keras' fit with steps_per_execution=1
(the old script traced a whole epoch into one graph; the shared protocol owns the loop).
"""
import keras
import numpy as np
import tensorflow as tf

from dlbench.frameworks import tensorflow as adapter
from dlbench.frameworks.tensorflow.loaders import distribute, host_tensor, loader_options
from dlbench.contract import Steps
from dlbench.frameworks.tensorflow.step import dtype_policy, make_adam, WorkloadMethods
from dlbench.workloads.mnist.task import Mnist
from dlbench.workloads.mnist.keras import build_model, load_weights, to_nhwc  # the Keras model, shared


class TensorFlowMnist(WorkloadMethods, Mnist, Steps):
    def build_model(self):
        keras.utils.set_random_seed(self.spec.seed)  # the same initial weights in every worker
        self.strategy = adapter.strategy(self.placement)
        with self.strategy.scope(), dtype_policy(self.applied_precision):
            self.model = build_model(self.spec.model.name)

        @tf.function(input_signature=[tf.TensorSpec((None, 28, 28, 1), tf.float32)])
        def infer(images):
            return tf.cast(self.model(images, training=False), tf.float32)  # a mixed policy's logits are 16-bit

        self.infer = infer

    def build_training(self):
        with self.strategy.scope():
            self.optimizer = make_adam(self.spec, self.spec.optimizer.lr, self.applied_precision)
            self.optimizer.build(self.model.trainable_variables)  # its slots mirrored too, made here
            self.loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        # The input pipeline's copy in host memory; no NumPy copy is kept beside it.
        self.images = host_tensor(to_nhwc(self.train_images))
        self.labels = host_tensor(self.train_labels.astype(np.int32))
        del self.train_images, self.train_labels
        self.step = self.make_step()

    def batches(self, order, epochs):
        def make_dataset(shards):
            # One vectorised gather per batch, in the consuming thread (no map threads, no prefetch).
            return (tf.data.Dataset.from_tensor_slices(shards)
                    .map(lambda i: (tf.gather(self.images, i), tf.gather(self.labels, i)))
                    .with_options(loader_options(0)))

        return distribute(self.placement, order, make_dataset)

    model_inputs = staticmethod(to_nhwc)

    def predict(self, inputs):
        return self.infer(self.model_inputs(inputs)).numpy()

    def load_weights(self, weights):
        load_weights(self.model, weights)


WORKLOAD = TensorFlowMnist
