"""IMDB, the part every framework shares: token sequences, the learning-rate schedule, test
accuracy.

The model: Embedding(vocabulary, E) -> one-layer LSTM(H) -> the last step's output -> Dense
logits (2 classes), each framework's fused LSTM; Adam; softmax cross-entropy. The reviews
are padded in front, so the last step has read the whole review.

Loading: each framework's own loader (PyTorch DataLoader, Gluon DataLoader, tf.data) over
the shared index batches, each batch gathered in one vectorised step (a worker gathers a
whole batch); `workers` is the loader's worker count, 0 loading in the training process
without background threads. Workers are started before the first epoch and kept.
"""
import numpy as np

from dlbench.contract import Workload

EVAL_BATCH = 500


def load_split(sequences_path, labels_path, limit, maxlen):
    sequences = np.load(sequences_path, mmap_mode="r")
    labels = np.load(labels_path, mmap_mode="r")
    if sequences.ndim != 2 or sequences.shape[1] != maxlen:
        raise ValueError(f"{sequences_path}: sequences of shape {sequences.shape}, the model reads {maxlen} steps")
    limit = limit or len(sequences)
    return np.array(sequences[:limit], dtype=np.int64), np.array(labels[:limit], dtype=np.int64)


class Imdb(Workload):
    def load_data(self):
        data, maxlen = self.spec.data, self.spec.model.maxlen
        self.train_sequences, self.train_labels = load_split(data.train_sequences, data.train_labels,
                                                             data.train_limit, maxlen)
        self.n_train = len(self.train_labels)
        if self.placement.rank == 0:
            self.test_sequences, self.test_labels = load_split(data.test_sequences, data.test_labels,
                                                               data.test_limit, maxlen)

    def learning_rate(self, epoch):
        """The study's schedule: the base rate times `factor` every `every_epochs` epochs."""
        schedule = self.spec.schedule
        return self.spec.optimizer.lr * schedule.factor ** ((epoch - 1) // schedule.every_epochs)

    def epoch_info(self, epoch):
        return {"lr": self.learning_rate(epoch)}

    def evaluate(self):
        correct = 0
        for i in range(0, len(self.test_labels), EVAL_BATCH):
            outputs = self.predict(self.test_sequences[i:i + EVAL_BATCH])
            correct += int((outputs.argmax(axis=1) == self.test_labels[i:i + EVAL_BATCH]).sum())
        return {"test_accuracy": correct / len(self.test_labels)}

    def test_inputs(self):
        """The test split's inputs, as the model reads them (the ONNX export's check)."""
        return self.test_sequences

    def precision_inputs(self):
        """The batch of the precision probe (dlbench.precision): the run's batch of test inputs, no
        larger than a training step's, so the probe never sets the run's peak memory."""
        return self.test_sequences[:self.spec.batch]
