"""The product in TensorFlow: tf.linalg.matmul, eager, on the run's device, its operands in the
run's precision (the proof: the dtype of the product the op returned, its T)."""
import tensorflow as tf

from dlbench.frameworks import tensorflow as adapter
from dlbench.contract import Steps
from dlbench.studies.matmul.task import Matmul


class TensorFlowMatmul(Matmul, Steps):
    def build_training(self):
        self.device = adapter.strategy(self.placement).extended.worker_devices[0]

    def on_device(self, *arrays):
        with tf.device(self.device):
            return tuple(tf.identity(tf.cast(tf.constant(a), self.compute_dtype)) for a in arrays)

    def product_sum(self, left, right):
        with tf.device(self.device):
            return tf.reduce_sum(tf.linalg.matmul(left, right))

    def product_dtype(self, left, right):
        with tf.device(self.device):
            return tf.linalg.matmul(left, right).dtype.name


WORKLOAD = TensorFlowMatmul
