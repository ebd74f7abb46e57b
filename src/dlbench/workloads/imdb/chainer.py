"""IMDB sentiment LSTM in Chainer, fed by a chainer.iterators iterator with `workers` worker
processes (MultiprocessIterator; SerialIterator in this process with 0 workers).

Each example of the iterator's dataset is a whole index batch of the run's order, which the
dataset (numpy arrays) gathers in one vectorised step, in a worker or in this process; the
iterator takes one such example per batch. A MultiprocessIterator fetches its next batch in
its pool while the step runs (one batch in flight: with a whole batch per example, one worker
gathers at a time).
"""
import chainer
import chainer.functions as F
import chainer.links as L
import numpy as np

from dlbench.frameworks import chainer as adapter
from dlbench.frameworks.chainer.loaders import iterator, started
from dlbench.contract import Steps
from dlbench.frameworks.chainer.step import WorkloadMethods, assign, make_optimizer
from dlbench.workloads.imdb.task import Imdb

GATES = 4  # i, f, g, o: PyTorch's order, and the order of NStepLSTM's w0-w3 (input) and w4-w7 (recurrent)


class SentimentLSTM(chainer.Chain):
    """Embedding -> one-layer NStepLSTM (cuDNN's LSTM on GPUs) -> the last step's output ->
    logits; 772,354 parameters at 5000,128,128 (NStepLSTM has two bias vectors per gate, as
    PyTorch's and MXNet's)."""

    def __init__(self, vocabulary, embedding, hidden, classes):
        super().__init__()
        with self.init_scope():
            self.embedding = L.EmbedID(vocabulary, embedding)
            self.lstm = L.NStepLSTM(1, embedding, hidden, dropout=0.0)
            self.classifier = L.Linear(hidden, classes)

    def forward(self, tokens):
        # NStepLSTM reads a list of sequences; hy is each one's last hidden state. The reviews
        # are padded in front, so the last step has read the whole review.
        hy, _, _ = self.lstm(None, None, F.separate(self.embedding(tokens), axis=0))
        return self.classifier(hy[-1])


def build_model(model):
    """model: the spec's LstmModel."""
    return SentimentLSTM(model.vocabulary, model.embedding, model.hidden, model.classes)


class IndexBatches(chainer.dataset.DatasetMixin):
    """Example i: the tokens and labels of the i-th index batch of the run's order, gathered in
    one step (fancy indexing). Empty until `order` is set."""

    def __init__(self, sequences, labels):
        self.sequences, self.labels = sequences, labels
        self.order = np.empty((0, 0), dtype=np.int64)

    def __len__(self):
        return len(self.order)

    def get_example(self, i):
        indices = self.order[i]
        return self.sequences[indices], self.labels[indices]


class ChainerImdb(WorkloadMethods, Imdb, Steps):
    input_dtype = "int32"  # EmbedID's token ids

    def build_model(self):
        np.random.seed(self.spec.seed)  # Chainer's initializers draw from numpy's global generator
        self.model = build_model(self.spec.model)
        self.model.to_device(adapter.device(self.placement))

    def build_training(self):
        self.optimizer = make_optimizer(self.model, self.spec.optimizer, self.placement)
        self.loss_fn = F.softmax_cross_entropy
        self.train_set = IndexBatches(self.train_sequences.astype(np.int32), self.train_labels.astype(np.int32))
        self.iterator = iterator(self.placement, self.train_set, 1, self.spec.workers)

    def batches(self, order, epochs):
        self.train_set.order = order  # before the iterator's worker pool starts (forked with it)
        send = adapter.device(self.placement).send
        return ((send(tokens), send(labels)) for ((tokens, labels),) in started(self.iterator, self.spec.workers))

    def load_weights(self, weights):
        """NStepLSTM's gates are PyTorch's (i, f, g, o) in separate arrays: PyTorch's weight_ih,
        weight_hh, bias_ih and bias_hh, split in four along the rows, are w0-w3, w4-w7, b0-b3
        and b4-b7."""
        expected = {"embedding.weight", "lstm.weight_ih_l0", "lstm.weight_hh_l0", "lstm.bias_ih_l0",
                    "lstm.bias_hh_l0", "classifier.weight", "classifier.bias"}
        if set(weights) != expected:
            raise ValueError(f"expected PyTorch's arrays {sorted(expected)}, got {sorted(weights)}")
        assign(self.model.embedding.W, weights["embedding.weight"], "embedding.weight")
        cell = self.model.lstm[0]
        for offset, (kind, name) in enumerate([("w", "weight_ih"), ("w", "weight_hh"), ("b", "bias_ih"),
                                               ("b", "bias_hh")]):
            first = GATES * (offset % 2)  # input arrays 0-3, recurrent 4-7
            for gate, value in enumerate(np.split(weights[f"lstm.{name}_l0"], GATES)):
                assign(getattr(cell, f"{kind}{first + gate}"), value, f"lstm.{name}_l0 gate {gate}")
        assign(self.model.classifier.W, weights["classifier.weight"], "classifier.weight")
        assign(self.model.classifier.b, weights["classifier.bias"], "classifier.bias")


WORKLOAD = ChainerImdb
