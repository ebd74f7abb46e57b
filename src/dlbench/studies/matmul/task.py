"""The matmul workload (the machine's peak), the part every framework shares: the same two float32 matrices from the
seed in every framework, and a step that multiplies them (the framework's module: its product
and the sum of it, returned as the step's loss so that the device sync waits for it)."""
import numpy as np

from dlbench.contract import WithoutModel


class Matmul(WithoutModel):
    def load_data(self):
        rng = np.random.default_rng(self.spec.seed)
        size = self.spec.size
        self.left, self.right = (rng.standard_normal((size, size), dtype=np.float32) for _ in range(2))
        self.n_train = 1  # every step multiplies the same two matrices

    def build_training(self):
        """Nothing to build: the operands go to the device in batches, outside any clock."""

    def batches(self, order, epochs):
        operands = self.on_device(self.left, self.right)
        return (operands for _ in order)

    def train_step(self, batch):
        return self.product_sum(*batch)
