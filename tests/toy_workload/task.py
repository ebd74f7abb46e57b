"""The toy workload, the part every framework shares: the arrays and test accuracy."""
import numpy as np

from dlbench.contract import Workload


class Toy(Workload):
    def load_data(self):
        data = self.spec.data
        self.train_x, self.train_y = np.load(data.train_x), np.load(data.train_y)
        self.test_x, self.test_y = np.load(data.test_x), np.load(data.test_y)
        self.n_train = len(self.train_y)

    def evaluate(self):
        return {"test_accuracy": float((self.predict(self.test_x).argmax(axis=1) == self.test_y).mean())}
