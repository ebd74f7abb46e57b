"""MNIST CNNs in Keras 3 (keras-tensorflow, keras-jax, keras-torch: the same code, on the
backend the env's KERAS_BACKEND chooses): one device, MirroredStrategy (TensorFlow),
keras.distribution.DataParallel (JAX).

model.fit over a PyDataset whose item i is one vectorised gather of the batch of the run's step
offset + i from the training arrays in memory (NHWC), in the training process (MNIST has no
loader workers in any framework); the clock's callback drives the protocol's blocks from fit's
epoch hooks (dlbench.frameworks.keras).
"""
import keras
import numpy as np
from keras import layers

from dlbench.frameworks import keras as adapter
from dlbench.contract import OwnLoop
from dlbench.frameworks.keras.step import WorkloadMethods
from dlbench.frameworks.keras.loaders import run_batches
from dlbench.workloads.mnist.task import Mnist


def build_model(name):
    """The models every framework builds; 402,442 and 4,104,202 parameters (channels last)."""
    def conv(filters):
        return [layers.Conv2D(filters, 3, padding="same", activation="relu"), layers.MaxPooling2D(2)]

    if name == "small":
        body = [*conv(32), layers.Flatten(), layers.Dense(64, activation="relu")]
    elif name == "large":
        body = [*conv(128), *conv(256), *conv(512), layers.Flatten(),
                layers.Dense(512, activation="relu"), layers.Dense(512, activation="relu")]
    else:
        raise ValueError(f"unknown model {name!r}")
    # the logits in float32 under a mixed policy (Keras' mixed-precision guide)
    return keras.Sequential([keras.Input((28, 28, 1)), *body, layers.Dense(10, dtype="float32")])


def to_nhwc(images):
    return np.ascontiguousarray(images.transpose(0, 2, 3, 1))


def load_weights(model, weights):
    """PyTorch's nn.Sequential state dict into the Keras model: conv OIHW -> HWIO, linear
    (out, in) -> (in, out); the first linear layer's inputs reordered from PyTorch's C,H,W
    flattening to Keras' H,W,C."""
    indices = sorted({int(name.split(".")[0]) for name in weights})
    keras_layers = [layer for layer in model.layers if layer.weights]
    if len(indices) != len(keras_layers):
        raise ValueError(f"{len(indices)} PyTorch layers with weights, the Keras model has {len(keras_layers)}")
    flatten = next(layer for layer in model.layers if isinstance(layer, layers.Flatten))
    height, width, channels = flatten.input.shape[1:]
    first_dense = True
    for index, layer in zip(indices, keras_layers):
        kernel, bias = weights[f"{index}.weight"], weights[f"{index}.bias"]
        if isinstance(layer, layers.Conv2D):
            kernel = kernel.transpose(2, 3, 1, 0)
        elif first_dense:
            kernel = (kernel.reshape(-1, channels, height, width).transpose(0, 2, 3, 1)
                      .reshape(kernel.shape[0], -1).T)
            first_dense = False
        else:
            kernel = kernel.T
        layer.set_weights([kernel, bias])


class KerasMnist(WorkloadMethods, Mnist, OwnLoop):
    inputs_to_keras = staticmethod(to_nhwc)

    def build_model(self):
        keras.utils.set_random_seed(self.spec.seed)
        with adapter.scope(self.placement), adapter.dtype_policy(self.applied_precision):
            self.model = build_model(self.spec.model.name)

    def build_training(self):
        self.compile(keras.losses.SparseCategoricalCrossentropy(from_logits=True), self.spec.optimizer.lr,
                     labels=np.zeros(1, np.int32), outputs=np.zeros((1, 10), np.float32))
        images, labels = to_nhwc(self.train_images), self.train_labels.astype(np.int32)
        del self.train_images, self.train_labels  # the PyDataset's copy only

        def load(epoch, indices):
            return images[indices], labels[indices]

        self.train_data = run_batches(load, self.spec.global_batch, workers=0)

    def load_weights(self, weights):
        load_weights(self.model, weights)


WORKLOAD = KerasMnist
