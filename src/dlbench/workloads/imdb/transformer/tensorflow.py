"""IMDB's Transformer encoder classifier in TensorFlow: the Keras 3 model of imdb/transformer/keras.py
(keras.layers.MultiHeadAttention), trained in TensorFlow's own loop as the LSTM is (imdb/tensorflow.py:
the tf.data loader, the step in the run's mode, Adam, the schedule, the dtype policy)."""
import keras
import tensorflow as tf

from dlbench.frameworks import tensorflow as adapter
from dlbench.frameworks.tensorflow.step import dtype_policy
from dlbench.workloads.imdb.tensorflow import TensorFlowImdb
from dlbench.workloads.imdb.transformer.keras import build_model, load_weights  # the Keras model, shared


class TensorFlowImdbTransformer(TensorFlowImdb):
    def build_model(self):
        keras.utils.set_random_seed(self.spec.seed)
        self.strategy = adapter.strategy(self.placement)
        m = self.spec.model
        with self.strategy.scope(), dtype_policy(self.applied_precision):
            self.model = build_model(m)

        @tf.function(input_signature=[tf.TensorSpec((None, m.maxlen), tf.int32)])
        def infer(sequences):
            return tf.cast(self.model(sequences, training=False), tf.float32)

        self.infer = infer

    def load_weights(self, weights):
        load_weights(self.model, weights)


WORKLOAD = TensorFlowImdbTransformer
