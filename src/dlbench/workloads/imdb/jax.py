"""IMDB sentiment LSTM in JAX (Flax NNX, optax): one device, a grain loader with N workers.

The model: nnx.Embed -> nnx.RNN over an nnx.OptimizedLSTMCell (the cell's input and recurrent
kernels as two matrix products per step, all its gates at once; the loop one lax.scan inside the
compiled step) -> the last step's output -> nnx.Linear logits. Hoisting the input products of
all steps out of the scan, as cuDNN does, measured slower on the CPU (0.51 against 0.46 s a step
at batch 32, 500 steps).

The loader (dlbench.frameworks.jax.loaders.Feed): grain over the run's index batches (one round, read
as far as the run goes), each batch gathered in one vectorised step (a worker gathers a whole
batch); 0 workers: in the consuming thread; N workers: N grain worker processes, started in build
and kept, reading the training arrays memory-mapped. Evaluation predicts the test arrays in
memory, without the loader. The learning rate is a hyperparameter in the optimizer state
(optax.inject_hyperparams), set by set_learning_rate at the step where the schedule changes it.
Mixed precision: the embedding's output, the cell's two products a step and the classifier in the
policy's dtype (`compute_dtype`), the parameters and the LSTM's carry (its param_dtype) float32;
the logits cast to float32 for the loss.
"""
import numpy as np
import optax
from flax import nnx

from dlbench.frameworks.jax.loaders import feed_order, GatherBatch, order_feed
from dlbench.contract import Steps
from dlbench.frameworks.jax.step import compute_dtype, make_adam, WorkloadMethods, Training
from dlbench.precision import LOSS_SCALING
from dlbench.workloads.imdb.task import Imdb


class SentimentLSTM(nnx.Module):
    """Embedding -> one-layer LSTM -> the last step's output -> logits; 771,842 parameters at
    5000,128,128: Flax's LSTM cells have one bias vector per gate, as Keras' (PyTorch and MXNet
    keep cuDNN's two, 4 * hidden parameters more: 772,354)."""

    def __init__(self, vocabulary, embedding, hidden, classes, rngs, dtype=None):
        self.embedding = nnx.Embed(vocabulary, embedding, dtype=dtype, rngs=rngs)
        self.lstm = nnx.RNN(nnx.OptimizedLSTMCell(embedding, hidden, dtype=dtype, rngs=rngs))
        self.classifier = nnx.Linear(hidden, classes, dtype=dtype, rngs=rngs)

    def __call__(self, tokens):
        outputs = self.lstm(self.embedding(tokens))
        # The reviews are padded in front, so the last step has read the whole review.
        return self.classifier(outputs[:, -1])


def build_model(model, rngs, dtype=None):
    """model: the spec's LstmModel; dtype: the computation's (compute_dtype)."""
    return SentimentLSTM(model.vocabulary, model.embedding, model.hidden, model.classes, rngs, dtype)


def cross_entropy(logits, labels):
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


class JaxImdb(WorkloadMethods, Imdb, Steps):
    input_dtype = "int32"

    def build_model(self):
        self.model = build_model(self.spec.model, nnx.Rngs(self.spec.seed), compute_dtype(self.applied_precision))

    def build_training(self):
        adam = make_adam(self.spec, self.spec.optimizer.lr)  # its rate set by set_learning_rate
        self.training = Training(self.placement, self.model, adam, cross_entropy,
                                 loss_scaling=LOSS_SCALING[self.applied_precision])
        self.loader = order_feed(self.placement, self.spec, "imdb")
        # The loader's copy in host memory (with workers, in its folder); no other copy is kept.
        arrays = self.loader.arrays((self.train_sequences.astype(np.int32), self.train_labels.astype(np.int32)))
        del self.train_sequences, self.train_labels
        self.loader.start(GatherBatch(arrays))

    def batches(self, order, epochs):
        return feed_order(self.placement, self.loader, order)

    def set_learning_rate(self, lr):
        self.training.set_learning_rate(lr)

    def train_step(self, batch):
        return self.training(*batch)

    def torch_weights(self, weights):
        """PyTorch's LSTM: its kernels transposed (its gates i, f, g, o are Flax's i, f, g, o),
        its two bias vectors summed into Flax's one; the rest by torch_to_flax."""
        weights = dict(weights)
        return {
            "embedding.weight": weights.pop("embedding.weight"),
            "lstm.cell.dense_i.weight": weights.pop("lstm.weight_ih_l0"),
            "lstm.cell.dense_h.weight": weights.pop("lstm.weight_hh_l0"),
            "lstm.cell.dense_h.bias": weights.pop("lstm.bias_ih_l0") + weights.pop("lstm.bias_hh_l0"),
            **weights,
        }


WORKLOAD = JaxImdb
