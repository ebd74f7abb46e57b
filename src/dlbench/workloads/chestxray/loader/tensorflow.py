"""The ChestX-ray training loader alone in TensorFlow: the ChestX-ray module's tf.data loader
(TrainLoader: decode, the shared seed's crop and flip, normalise, `workers` parallel map
calls) through the same input path as training (dlbench.frameworks.tensorflow.distribute),
one device (OneDeviceStrategy).
The step only touches each batch on the device.
"""
import tensorflow as tf

from dlbench.frameworks import tensorflow as adapter
from dlbench.workloads.chestxray.tensorflow import TrainLoader
from dlbench.contract import Steps
from dlbench.workloads.chestxray.loader.task import ChestXrayLoader


class TensorFlowChestXrayLoader(ChestXrayLoader, Steps):
    def build_training(self):
        self.loader = TrainLoader(self)
        strategy = adapter.strategy(self.placement)

        def touch(images, labels):
            return tf.reduce_sum(images[:, 0, 0, 0]) + tf.reduce_sum(labels[:, 0])

        @tf.function(reduce_retracing=True)
        def consume(batch):
            # Returned, so that the graph keeps the ops that read the batch.
            return strategy.experimental_local_results(strategy.run(touch, args=batch))

        self.consume = consume

    def batches(self, order, epochs):
        return self.loader.batches(order, epochs)

    def train_step(self, batch):
        """No loss: the batch is on the device, that is all a loader does."""
        self.consume(batch)


WORKLOAD = TensorFlowChestXrayLoader
