"""The ChestX-ray training loader alone in Keras 3 (keras-tensorflow, keras-jax, keras-torch):
the ChestX-ray module's PyDataset (PIL decode, the shared crop and flip, normalise; `workers`
Keras worker processes) over the run's order, read as model.fit reads it on the env's backend
(dlbench.frameworks.keras: on JAX and torch the epoch iterator fit makes of it, one epoch for
the whole run; on TensorFlow the tf.data pipeline fit is given), one device. There is no model
and no fit: the protocol's loop runs, and each step only touches the batch on the device.
"""
import keras

from dlbench.frameworks.keras.loaders import epoch_of, fit_epoch_iterator, fit_input
from dlbench.workloads.chestxray.keras import train_data
from dlbench.contract import Steps
from dlbench.workloads.chestxray.loader.task import ChestXrayLoader


class KerasChestXrayLoader(ChestXrayLoader, Steps):
    def build_training(self):
        self.train_data = train_data(self)

    def batches(self, order, epochs):
        self.train_data.set_run(order, epochs)
        data = fit_input(self)
        if data is self.train_data:
            return epoch_of(fit_epoch_iterator(data))
        return iter(data)

    def train_step(self, batch):
        """No loss: the batch on the device (as fit's step receives it), touched."""
        images, labels = batch
        keras.ops.sum(keras.ops.convert_to_tensor(images)[:, 0, 0, 0])
        keras.ops.sum(keras.ops.convert_to_tensor(labels)[:, 0])


WORKLOAD = KerasChestXrayLoader
