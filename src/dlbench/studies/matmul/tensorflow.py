"""The product in TensorFlow: tf.linalg.matmul, eager, on the run's device."""
import tensorflow as tf

from dlbench.frameworks import tensorflow as adapter
from dlbench.contract import Steps
from dlbench.studies.matmul.task import Matmul


class TensorFlowMatmul(Matmul, Steps):
    def build_training(self):
        self.device = adapter.strategy(self.placement).extended.worker_devices[0]

    def on_device(self, *arrays):
        with tf.device(self.device):
            return tuple(tf.identity(tf.constant(a)) for a in arrays)

    def product_sum(self, left, right):
        with tf.device(self.device):
            return tf.reduce_sum(tf.linalg.matmul(left, right))


WORKLOAD = TensorFlowMatmul
