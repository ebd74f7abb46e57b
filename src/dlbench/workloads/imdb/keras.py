"""IMDB sentiment LSTM in Keras 3 (keras-tensorflow, keras-jax, keras-torch: the same code, on
the backend the env's KERAS_BACKEND chooses): one device, Keras' loader with N workers.

The loader: a keras.utils.PyDataset whose item i is one vectorised gather of the batch of the
run's step offset + i from the sequences in memory; PyDataset(workers=N, use_multiprocessing=True):
with N > 0 Keras' OrderedEnqueuer gathers the batches in N worker processes, in order; with
0 in the training process (dlbench.frameworks.keras says how each Keras backend's fit reads it, and
keras-tensorflow's tf.data pipeline of the same batches). model.fit runs the protocol's blocks;
the learning rate follows the study's schedule by the run's step.
"""
import keras
import numpy as np
from keras import layers

from dlbench.frameworks import keras as adapter
from dlbench.contract import OwnLoop
from dlbench.frameworks.keras.step import WorkloadMethods
from dlbench.frameworks.keras.loaders import run_batches
from dlbench.workloads.imdb.task import Imdb


def build_model(vocabulary, embedding, hidden, maxlen, classes):
    """Embedding -> LSTM (the last step's output) -> Dense logits. Keras' LSTM has one bias vector
    per gate, so it has 4 * hidden parameters fewer than PyTorch's and MXNet's two (cuDNN's
    convention): 771,842 for 5000,128,128 against 772,354; load_weights sums PyTorch's two.

    The LSTM keeps the defaults that let Keras run its fused kernel (cuDNN on a GPU); the
    sequences are padded in front, so the last step is the review's last token. The logits'
    layer is float32 under a mixed policy (Keras' mixed-precision guide).
    """
    return keras.Sequential([
        keras.Input((maxlen,), dtype="int32"),
        layers.Embedding(vocabulary, embedding),
        layers.LSTM(hidden),
        layers.Dense(classes, dtype="float32"),
    ])


def load_weights(model, weights):
    """PyTorch's embedding, LSTM and classifier: the LSTM's kernels transposed (its gates i, f, g,
    o are Keras' i, f, c, o), its two bias vectors summed into Keras' one."""
    embedding, lstm, dense = model.layers
    embedding.set_weights([weights["embedding.weight"]])
    lstm.set_weights([weights["lstm.weight_ih_l0"].T, weights["lstm.weight_hh_l0"].T,
                      weights["lstm.bias_ih_l0"] + weights["lstm.bias_hh_l0"]])
    dense.set_weights([weights["classifier.weight"].T, weights["classifier.bias"]])


def to_tokens(sequences):
    return sequences.astype(np.int32, copy=False)


class KerasImdb(WorkloadMethods, Imdb, OwnLoop):
    inputs_to_keras = staticmethod(to_tokens)

    def build_model(self):
        keras.utils.set_random_seed(self.spec.seed)
        m = self.spec.model
        with adapter.scope(self.placement), adapter.dtype_policy(self.applied_precision):
            self.model = build_model(m.vocabulary, m.embedding, m.hidden, m.maxlen, m.classes)

    def build_training(self):
        # The learning rate follows the task's schedule by the run's step (WorkloadMethods.fit).
        self.compile(keras.losses.SparseCategoricalCrossentropy(from_logits=True), self.spec.optimizer.lr,
                     labels=np.zeros(1, np.int32), outputs=np.zeros((1, self.spec.model.classes), np.float32))
        sequences, labels = to_tokens(self.train_sequences), self.train_labels.astype(np.int32)
        del self.train_sequences, self.train_labels  # the PyDataset's copy only

        def load(epoch, indices):
            return sequences[indices], labels[indices]

        self.train_data = run_batches(load, self.spec.global_batch, workers=self.spec.workers)

    def load_weights(self, weights):
        load_weights(self.model, weights)


WORKLOAD = KerasImdb
