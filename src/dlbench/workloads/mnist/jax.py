"""MNIST CNNs in JAX (Flax NNX, optax): one device, or data parallel over a mesh of N devices
of one process, or of one process per node ("sharding": each batch split along the batch axis,
the state replicated).

The training data lives in host memory (channels last, as Flax's convolutions take it); each
batch is one vectorised numpy gather in the consuming thread, placed on the devices with the
batch sharding (no loader threads or prefetch: it loads when the step asks for it). One
jit-compiled step per batch (dlbench.frameworks.jax.step.Training). Mixed precision: the
convolutions and linear layers compute in the policy's dtype (`compute_dtype`; the first
convolution casts the images), their parameters float32; the logits cast to float32 for the loss.
"""
from functools import partial

import numpy as np
import optax
from flax import nnx

from dlbench.contract import Steps
from dlbench.frameworks.jax.step import abstract, compute_dtype, make_adam, WorkloadMethods, place_batch, Training
from dlbench.precision import LOSS_SCALING
from dlbench.workloads.mnist.task import Mnist


def flatten(x):
    return x.reshape(x.shape[0], -1)


def build_model(name, rngs, dtype=None):
    """The models every framework builds; 402,442 and 4,104,202 parameters (channels last). The
    layers of an nnx.Sequential, indexed as PyTorch's nn.Sequential (its '3.weight' is layers[3]).
    dtype: the layers' computation (compute_dtype), their parameters float32."""
    pool = partial(nnx.max_pool, window_shape=(2, 2), strides=(2, 2))
    linear = partial(nnx.Linear, dtype=dtype, rngs=rngs)

    def conv(channels_in, channels_out):
        return [nnx.Conv(channels_in, channels_out, (3, 3), padding=1, dtype=dtype, rngs=rngs), nnx.relu, pool]

    if name == "small":
        return nnx.Sequential(*conv(1, 32), flatten, linear(32 * 14 * 14, 64), nnx.relu, linear(64, 10))
    if name == "large":
        return nnx.Sequential(*conv(1, 128), *conv(128, 256), *conv(256, 512), flatten,
                              linear(512 * 3 * 3, 512), nnx.relu, linear(512, 512), nnx.relu, linear(512, 10))
    raise ValueError(f"unknown model {name!r}")


def to_nhwc(images):
    return np.ascontiguousarray(images.transpose(0, 2, 3, 1))


def cross_entropy(logits, labels):
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


class JaxMnist(WorkloadMethods, Mnist, Steps):
    def build_model(self):
        dtype = compute_dtype(self.applied_precision)
        self.model = abstract(lambda: build_model(self.spec.model.name, nnx.Rngs(self.spec.seed), dtype))

    def build_training(self):
        adam = make_adam(self.spec, self.spec.optimizer.lr)
        self.training = Training(self.placement, self.model, adam, cross_entropy,
                                 loss_scaling=LOSS_SCALING[self.applied_precision])
        # The loader's copy in host memory; no NCHW copy is kept beside it.
        self.images, self.labels = to_nhwc(self.train_images), self.train_labels.astype(np.int32)
        del self.train_images, self.train_labels

    def batches(self, order, epochs):
        # One vectorised gather per batch, in the consuming thread, then onto the devices.
        return (place_batch(self.placement, (self.images[indices], self.labels[indices]))
                for indices in order)

    def train_step(self, batch):
        return self.training(*batch)

    def to_model_layout(self, inputs):
        return to_nhwc(inputs)

    def torch_weights(self, weights):
        """The first linear layer's inputs reordered from PyTorch's C,H,W flattening to H,W,C."""
        weights = dict(weights)
        flat = next(i for i, layer in enumerate(self.model.layers) if layer is flatten)
        first = next(i for i, layer in enumerate(self.model.layers) if isinstance(layer, nnx.Linear))
        channels = self.model.layers[flat - 3].out_features  # the last conv, before ReLU and pool
        kernel = weights[f"{first}.weight"]
        side = round((kernel.shape[1] / channels) ** 0.5)
        weights[f"{first}.weight"] = (kernel.reshape(-1, channels, side, side).transpose(0, 2, 3, 1)
                                      .reshape(kernel.shape[0], -1))
        return weights


WORKLOAD = JaxMnist
