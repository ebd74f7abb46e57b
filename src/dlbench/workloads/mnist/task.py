"""MNIST, the part every framework shares: the prepared arrays and test accuracy.

The models (the same layers in every framework): small, Conv2d(1->32, 3x3, padding 1) + ReLU,
MaxPool 2, Flatten, Dense 64 + ReLU, Dense 10 (402,442 parameters); large, Conv 128, Pool,
Conv 256, Pool, Conv 512, Pool (3x3, padding 1, ReLU, max-pool 2), Dense 512, Dense 512,
Dense 10 (4,104,202). Adam and softmax cross-entropy. Inputs are float32 N x 1 x 28 x 28
(normalised), labels int64.
"""
import numpy as np

from dlbench.contract import Workload

EVAL_BATCH = 1000


def load_split(images_path, labels_path, limit):
    images = np.load(images_path, mmap_mode="r")
    labels = np.load(labels_path, mmap_mode="r")
    limit = limit or len(images)
    return np.array(images[:limit], dtype=np.float32), np.array(labels[:limit], dtype=np.int64)  # copies, writable


def accuracy(predict, inputs, labels, batch=EVAL_BATCH):
    """Share of (inputs, labels) whose largest output is the label."""
    correct = sum(int((predict(inputs[i:i + batch]).argmax(axis=1) == labels[i:i + batch]).sum())
                  for i in range(0, len(inputs), batch))
    return correct / len(inputs)


class Mnist(Workload):
    def load_data(self):
        data = self.spec.data
        self.train_images, self.train_labels = load_split(data.train_images, data.train_labels, data.train_limit)
        self.n_train = len(self.train_labels)
        if self.placement.rank == 0:
            self.test_images, self.test_labels = load_split(data.test_images, data.test_labels, data.test_limit)

    def evaluate(self):
        return {"test_accuracy": accuracy(self.predict, self.test_images, self.test_labels)}

    def test_inputs(self):
        """The test split's inputs, as the model reads them (the ONNX export's check)."""
        return self.test_images

    def precision_inputs(self):
        """The batch of the precision probe (dlbench.precision): the run's batch of test inputs, no
        larger than a training step's, so the probe never sets the run's peak memory."""
        return self.test_images[:self.spec.batch]
