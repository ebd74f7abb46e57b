"""The matmul workload (the machine's peak), the part every framework shares: the same two float32 matrices from the
seed in every framework, in the run's precision (float32, or the 16-bit type of mixed-bfloat16 and
mixed-float16: the operands cast on the device, outside the clock, so that the product runs in that
type's arithmetic), and a step that multiplies them (the framework's module: its product and the sum
of it, returned as the step's loss so that the device sync waits for it).

The proof of the precision (dlbench.precision), as every training run's: the framework part's
`product_ops` lists the product as the framework ran it (PyTorch's dispatched aten op, XLA's compiled
HLO, the dtype TensorFlow's, MXNet's and Chainer's product returned), so that a peak counts for the
precision its product computed in, not the one asked for."""
import numpy as np

from dlbench import precision
from dlbench.contract import WithoutModel


class Matmul(WithoutModel):
    @property
    def compute_dtype(self):
        """The operands' dtype: float32, bfloat16 or float16 (the applied policy's compute dtype)."""
        return precision.COMPUTE_DTYPE[self.applied_precision]

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

    def precision_inputs(self):
        """The operands on the device, in the run's precision: the proof runs (or compiles) one product."""
        return self.on_device(self.left, self.right)

    def precision_ops(self, inputs):
        """(the product as the framework ran it, whether the loss is scaled): a product has no loss to
        scale, so the policy's own answer (float16's dynamic scaling is a training matter)."""
        return self.product_ops(*inputs), precision.LOSS_SCALING[self.applied_precision]

    def product_ops(self, left, right):
        """[dlbench.precision.op]: the product of left and right as this framework ran it (default:
        the dtype of the product it returns; a framework with a record of what ran reads that)."""
        return [precision.op("product", self.product_dtype(left, right), 2 * self.spec.size ** 3)]
