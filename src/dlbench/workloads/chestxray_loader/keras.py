"""The ChestX-ray training loader alone in Keras 3 (keras-tensorflow, keras-jax, keras-torch):
the ChestX-ray module's PyDataset (PIL decode, the shared crop and flip, normalise; `workers`
Keras worker processes), read through the epoch iterator that model.fit makes of it on the
env's backend (dlbench.frameworks.keras.fit_epoch_iterator), one device. There is no model and
no fit: the protocol's loop runs, and each step only touches the batch on the device.
"""
import keras

from dlbench.frameworks import keras as backend
from dlbench.workloads.chestxray.keras import train_data
from dlbench.workloads.chestxray_loader import ChestXrayLoader


class KerasChestXrayLoader(ChestXrayLoader):
    def build_training(self):
        self.train_data = train_data(self)
        self.epochs = backend.fit_epoch_iterator(self.train_data)

    def batches(self, epoch, order):
        self.train_data.set_order(epoch, order)
        return backend.epoch_of(self.epochs)

    def train_step(self, batch):
        """No loss: the batch on the device (as fit's step receives it), touched."""
        images, labels = batch
        keras.ops.sum(keras.ops.convert_to_tensor(images)[:, 0, 0, 0])
        keras.ops.sum(keras.ops.convert_to_tensor(labels)[:, 0])


WORKLOAD = KerasChestXrayLoader
