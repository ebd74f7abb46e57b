"""IMDB sentiment LSTM in TensorFlow/Keras 3: one device, a tf.data loader with N workers.

The loader: tf.data over the run's index batches, each batch gathered in one tf.gather
from the sequences in host memory. With workers > 0 the gathers run as `workers` parallel map
calls in a private pool of `workers` threads, `workers` batches prefetched; with 0 workers
they run in the consuming thread, without the parallelism or prefetch tf.data would add
itself. One step per batch (a tf.function in the default mode, graph) (strategy.run under OneDeviceStrategy), called from
the harness's loop, as Keras' fit with steps_per_execution=1 (the old script traced a whole
epoch into one graph; the shared protocol owns the loop).
"""
import keras
import numpy as np
import tensorflow as tf

from dlbench.frameworks import tensorflow as adapter
from dlbench.frameworks.tensorflow.loaders import distribute, host_tensor, loader_options
from dlbench.contract import Steps
from dlbench.frameworks.tensorflow.step import dtype_policy, make_adam, WorkloadMethods
from dlbench.workloads.imdb.task import Imdb
from dlbench.workloads.imdb.keras import build_model, load_weights  # the Keras model, shared


class TensorFlowImdb(WorkloadMethods, Imdb, Steps):
    def build_model(self):
        keras.utils.set_random_seed(self.spec.seed)
        self.strategy = adapter.strategy(self.placement)
        m = self.spec.model
        with self.strategy.scope(), dtype_policy(self.applied_precision):
            self.model = build_model(m.vocabulary, m.embedding, m.hidden, m.maxlen, m.classes)

        @tf.function(input_signature=[tf.TensorSpec((None, m.maxlen), tf.int32)])
        def infer(sequences):
            return tf.cast(self.model(sequences, training=False), tf.float32)  # a mixed policy's logits are 16-bit

        self.infer = infer

    def build_training(self):
        with self.strategy.scope():
            self.optimizer = make_adam(self.spec, self.spec.optimizer.lr, self.applied_precision)  # see set_learning_rate
            self.optimizer.build(self.model.trainable_variables)
            self.loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        # The loader's copy in host memory, gathered from as a loader would; no NumPy copy beside it.
        self.sequences = host_tensor(self.train_sequences.astype(np.int32))
        self.labels = host_tensor(self.train_labels.astype(np.int32))
        del self.train_sequences, self.train_labels
        self.step = self.make_step()

    def batches(self, order, epochs):
        workers = self.spec.workers

        def make_dataset(shards):
            data = tf.data.Dataset.from_tensor_slices(shards).map(
                lambda i: (tf.gather(self.sequences, i), tf.gather(self.labels, i)),
                num_parallel_calls=workers or None)
            if workers:
                data = data.prefetch(workers)
            return data.with_options(loader_options(workers))

        return distribute(self.placement, order, make_dataset)

    def set_learning_rate(self, lr):
        self.optimizer.learning_rate = lr  # assigns the optimizer's rate variable: the step is not retraced

    def model_inputs(self, inputs):
        return inputs.astype(np.int32)

    def predict(self, inputs):
        return self.infer(self.model_inputs(inputs)).numpy()

    def load_weights(self, weights):
        load_weights(self.model, weights)


WORKLOAD = TensorFlowImdb
