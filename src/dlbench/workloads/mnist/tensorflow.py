"""MNIST CNNs in TensorFlow/Keras 3: one device (OneDeviceStrategy), MirroredStrategy,
MultiWorkerMirroredStrategy.

The training data lives in host memory as tensors; each batch is one tf.gather in a tf.data
pipeline per replica (dlbench.frameworks.tensorflow.distribute), with no loader threads or
prefetch: it loads when the step asks for it. One tf.function step per batch
(strategy.run), called from the harness's loop, as Keras' fit with steps_per_execution=1
(the old script traced a whole epoch into one graph; the shared protocol owns the loop).
"""
import keras
import numpy as np
import tensorflow as tf
from keras import layers

from dlbench.frameworks import tensorflow as backend
from dlbench.workloads.mnist import Mnist


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
    return keras.Sequential([keras.Input((28, 28, 1)), *body, layers.Dense(10)])


def to_nhwc(images):
    return np.ascontiguousarray(images.transpose(0, 2, 3, 1))


class TensorFlowMnist(backend.StepMethods, Mnist):
    def build_model(self):
        keras.utils.set_random_seed(self.spec.seed)  # the same initial weights in every worker
        self.strategy = backend.strategy(self.placement)
        with self.strategy.scope():
            self.model = build_model(self.spec.model.name)

        @tf.function(input_signature=[tf.TensorSpec((None, 28, 28, 1), tf.float32)])
        def infer(images):
            return self.model(images, training=False)

        self.infer = infer

    def build_training(self):
        with self.strategy.scope():
            self.optimizer = backend.make_adam(self.spec, self.spec.optimizer.lr)
            self.optimizer.build(self.model.trainable_variables)  # its slots mirrored too, made here
            self.loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        # The input pipeline's copy in host memory; no NumPy copy is kept beside it.
        self.images = backend.host_tensor(to_nhwc(self.train_images))
        self.labels = backend.host_tensor(self.train_labels.astype(np.int32))
        del self.train_images, self.train_labels
        self.step = backend.make_train_step(self.placement, self.replica_step)

    def batches(self, epoch, order):
        def make_dataset(shards):
            # One vectorised gather per batch, in the consuming thread (no map threads, no prefetch).
            return (tf.data.Dataset.from_tensor_slices(shards)
                    .map(lambda i: (tf.gather(self.images, i), tf.gather(self.labels, i)))
                    .with_options(backend.loader_options(0)))

        return backend.distribute(self.placement, order, make_dataset)

    def predict(self, inputs):
        return self.infer(to_nhwc(inputs)).numpy()

    def load_weights(self, weights):
        """PyTorch's nn.Sequential state dict: conv OIHW -> HWIO, linear (out, in) -> (in, out);
        the first linear layer's inputs reordered from PyTorch's C,H,W flattening to Keras' H,W,C."""
        indices = sorted({int(name.split(".")[0]) for name in weights})
        keras_layers = [layer for layer in self.model.layers if layer.weights]
        if len(indices) != len(keras_layers):
            raise ValueError(f"{len(indices)} PyTorch layers with weights, the Keras model has {len(keras_layers)}")
        flatten = next(layer for layer in self.model.layers if isinstance(layer, layers.Flatten))
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


WORKLOAD = TensorFlowMnist
