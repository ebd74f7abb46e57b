"""DenseNet (chestxray.blocks; DenseNet-121 in the studies) on ChestX-ray14
in JAX (Flax NNX, optax): one device, or data parallel over a
mesh of N devices of one process, or of one process per node ("sharding").

The model is the project's DenseNet-BC (as workloads/chestxray/pytorch.py builds it: the same
layers, torchvision's module names and initialisation), channels last, BatchNorm with
PyTorch's epsilon 1e-5 and momentum 0.1 (Flax's momentum 0.9: the weight of the old running
value). 14 logits, sigmoid + binary cross-entropy, Adam at the base learning rate times the
device count. Input "real": the preprocessed images of the run's order through grain
(dlbench.frameworks.jax.loaders.Feed, one round read as far as the run goes: PIL decode, the crop and
flip the shared seed draws for each step's epoch and sample, normalise, in the consuming thread
or in `workers` persistent worker processes); "synthetic": the task's random tensors (channels
last) in host memory, gathered by index % pool in the consuming thread, no loader, and on a GPU
placed one batch ahead (jax.device_put before the step before it is dispatched: both run
asynchronously, so the copy overlaps that step; on a CPU there is nothing to overlap, as Keras'
JAX trainer says); "resident": the same tensors (replicated over the mesh) and every step's indices
(sharded as its batch) placed once, outside the clock, each batch gathered on the devices by a
jitted take: no transfer from the host in a step. Evaluation
decodes the validation and test images through a grain loader of its own with `workers` workers
too (kept for the run: one round per evaluation, after each convergence segment while the
training order is still being read, and the final test). One jit-compiled step per batch
(dlbench.frameworks.jax.step.Training). Mixed precision: the convolutions and the classifier
compute in the policy's dtype (`compute_dtype`; the first convolution casts the images), the
batch normalisations in float32 (their float32 parameters promote them), every parameter float32;
the logits cast to float32 for the loss.
"""
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from dlbench.workloads.chestxray.images import eval_transform, read_image, sample_rng, train_transform
from dlbench.frameworks.jax.loaders import Feed, feed_order, order_feed
from dlbench.frameworks.jax.step import abstract, compute_dtype, make_adam, WorkloadMethods, place_batch, Training
from dlbench.precision import LOSS_SCALING
from dlbench.frameworks.jax.torch_weights import torch_to_flax
from dlbench.clock import Plan
from dlbench.contract import Steps, one_ahead
from dlbench.workloads.chestxray.task import ChestXray

# --- the model: DenseNet-BC with torchvision's module names ----------------------------------------

KAIMING_NORMAL = nnx.initializers.variance_scaling(2.0, "fan_in", "normal")  # nn.init.kaiming_normal_
TORCH_LINEAR = nnx.initializers.variance_scaling(1 / 3, "fan_in", "uniform")  # nn.Linear's default weight


def conv(in_features, out_features, kernel, rngs, dtype, stride=1, padding=0):
    return nnx.Conv(in_features, out_features, (kernel, kernel), strides=stride, padding=padding, use_bias=False,
                    kernel_init=KAIMING_NORMAL, dtype=dtype, rngs=rngs)


def batch_norm(features, rngs):
    return nnx.BatchNorm(features, momentum=0.9, epsilon=1e-5, rngs=rngs)


class DenseLayer(nnx.Module):
    """BN-ReLU-conv1x1 (bottleneck x growth channels), BN-ReLU-conv3x3 (growth channels)."""

    def __init__(self, in_features, growth, bottleneck, rngs, dtype):
        self.norm1 = batch_norm(in_features, rngs)
        self.conv1 = conv(in_features, bottleneck * growth, 1, rngs, dtype)
        self.norm2 = batch_norm(bottleneck * growth, rngs)
        self.conv2 = conv(bottleneck * growth, growth, 3, rngs, dtype, padding=1)

    def __call__(self, features):
        bottleneck = self.conv1(nnx.relu(self.norm1(features)))
        return self.conv2(nnx.relu(self.norm2(bottleneck)))


class DenseBlock(nnx.Module):
    def __init__(self, layers, in_features, growth, bottleneck, rngs, dtype):
        self.names = tuple(f"denselayer{i + 1}" for i in range(layers))
        for i, name in enumerate(self.names):
            setattr(self, name, DenseLayer(in_features + i * growth, growth, bottleneck, rngs, dtype))

    def __call__(self, x):
        features = [x]
        for name in self.names:
            features.append(getattr(self, name)(jnp.concatenate(features, axis=-1)))
        return jnp.concatenate(features, axis=-1)


class Transition(nnx.Module):
    """BN-ReLU-conv1x1 (compression) and 2x2 average pooling."""

    def __init__(self, in_features, out_features, rngs, dtype):
        self.norm = batch_norm(in_features, rngs)
        self.conv = conv(in_features, out_features, 1, rngs, dtype)

    def __call__(self, x):
        return nnx.avg_pool(self.conv(nnx.relu(self.norm(x))), (2, 2), strides=(2, 2))


class Features(nnx.Module):
    """conv 7x7/2, BN, ReLU, max pool 3x3/2, dense blocks and transitions, final BN."""

    def __init__(self, blocks, growth, bottleneck, compression, init_features, rngs, dtype):
        self.conv0 = conv(3, init_features, 7, rngs, dtype, stride=2, padding=3)
        self.norm0 = batch_norm(init_features, rngs)
        names, features = [], init_features
        for i, layers in enumerate(blocks):
            setattr(self, f"denseblock{i + 1}", DenseBlock(layers, features, growth, bottleneck, rngs, dtype))
            names.append(f"denseblock{i + 1}")
            features += layers * growth
            if i != len(blocks) - 1:
                out_features = int(features * compression)
                setattr(self, f"transition{i + 1}", Transition(features, out_features, rngs, dtype))
                names.append(f"transition{i + 1}")
                features = out_features
        self.names, self.out_features = tuple(names), features
        self.norm5 = batch_norm(features, rngs)

    def __call__(self, x):
        x = nnx.relu(self.norm0(self.conv0(x)))
        x = nnx.max_pool(x, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))
        for name in self.names:
            x = getattr(self, name)(x)
        return self.norm5(x)


class DenseNet(nnx.Module):
    """features, ReLU, global average pooling, a linear classifier of `classes` logits;
    initialised as torchvision initialises it (Kaiming-normal convolutions, BN weight 1 and bias
    0, linear bias 0, the linear weight as PyTorch's default). dtype: the convolutions' and the
    classifier's computation (compute_dtype)."""

    def __init__(self, classes, blocks, growth, bottleneck, compression, init_features, rngs, dtype=None):
        self.features = Features(blocks, growth, bottleneck, compression, init_features, rngs, dtype)
        self.classifier = nnx.Linear(self.features.out_features, classes, kernel_init=TORCH_LINEAR, dtype=dtype,
                                     rngs=rngs)

    def __call__(self, x):
        return self.classifier(jnp.mean(nnx.relu(self.features(x)), axis=(1, 2)))


def build_model(model, rngs, dtype=None):
    """model: the spec's DenseNetModel (DenseNet-121: 6,968,206 parameters with 14 outputs)."""
    return DenseNet(model.classes, model.blocks, model.growth, model.bottleneck, model.compression,
                    model.init_features, rngs, dtype)


def load_imagenet_weights(model, path):
    """ImageNet weights as an .npz of torchvision's DenseNet-121 state dict (PyTorch's names
    and layouts, as the parity test's weights): everything but the classifier, which keeps its
    initialisation (14 outputs, not 1000)."""
    with np.load(path) as arrays:
        weights = {name: arrays[name] for name in arrays.files}
    torch_to_flax(model, weights, keep=("classifier.",))


# --- data ------------------------------------------------------------------------------------------

def to_nhwc(images):
    return np.ascontiguousarray(images.transpose(0, 2, 3, 1))


class TrainBatch:
    """A grain element loader over the payload (order, epochs): the index batch `position` of
    the run's order, each image decoded with PIL, cropped and flipped as the shared seed draws
    for (the step's epoch, index), normalised, channels last; with its labels."""

    def __init__(self, paths, labels, seed, crop):
        self.paths, self.labels, self.seed, self.crop = paths, labels, seed, crop

    def __call__(self, payload, position):
        order, epochs = payload
        epoch, indices = int(epochs[position]), order[position]
        images = np.stack([train_transform(read_image(self.paths[i], "pillow"), sample_rng(self.seed, epoch, int(i)),
                                           self.crop, channels_last=True) for i in indices])
        return images, self.labels[indices]


class EvalBatch:
    """A grain element loader over the payload (paths,): batch `position` of the paths, decoded
    with PIL, centre-cropped, normalised (NCHW, as the task's evaluation passes inputs)."""

    def __init__(self, batch, crop):
        self.batch, self.crop = batch, crop

    def __call__(self, payload, position):
        paths, = payload
        chunk = paths[position * self.batch:(position + 1) * self.batch]
        return np.stack([eval_transform(read_image(str(p), "pillow"), self.crop) for p in chunk])


def sigmoid_cross_entropy(logits, labels):
    """The mean over samples and findings."""
    return optax.sigmoid_binary_cross_entropy(logits, labels).mean()


class JaxChestXray(WorkloadMethods, ChestXray, Steps):
    def build_model(self):
        def build():
            return build_model(self.spec.model, nnx.Rngs(self.spec.seed), compute_dtype(self.applied_precision))

        if self.spec.weights:  # ImageNet's, but for the classifier, which keeps its initialisation
            self.model = build()
            load_imagenet_weights(self.model, self.spec.weights)
        else:  # the shared initial weights set every variable
            self.model = abstract(build)

    def build_training(self):
        adam = make_adam(self.spec, self.learning_rate)
        self.training = Training(self.placement, self.model, adam, sigmoid_cross_entropy,
                                 loss_scaling=LOSS_SCALING[self.applied_precision])
        spec = self.spec
        if spec.input in ("synthetic", "resident"):  # the loader's copy in host memory, as MNIST keeps its data
            self.images, self.labels = to_nhwc(self.synthetic_images), self.synthetic_labels
            del self.synthetic_images, self.synthetic_labels
        else:
            self.loader = order_feed(self.placement, spec, "chestxray")
            self.loader.start(TrainBatch(self.train_paths, self.train_labels, spec.seed, spec.data.crop))
        if self.placement.rank == 0:
            # A Feed of its own, not queued behind the training order's unread batches: one round
            # per evaluation, in the order the task evaluates: valid after every convergence
            # segment, then test.
            valid, test = (self.eval_batches(len(self.eval_files[split][0])) for split in ("valid", "test"))
            segments = len(Plan(spec.measure, spec.convergence).segment_steps)
            self.eval_loader = Feed(self.placement, [valid] * segments + [test], spec.workers,
                                            "chestxray-eval").start(self.eval_load())

    def eval_batches(self, images):
        return math.ceil(images / self.spec.batch)

    def eval_load(self):
        return EvalBatch(self.spec.batch, self.spec.data.crop)

    def batches(self, order, epochs):
        if self.spec.input == "real":
            return feed_order(self.placement, self.loader, order, epochs)
        if self.spec.input == "resident":
            return self._resident_batches(order)
        batches = self._synthetic_batches(order)
        return one_ahead(batches) if self.placement.device_kind == "gpu" else batches

    def _synthetic_batches(self, order):
        """The process's batches of the in-memory set, gathered by index (no loader)."""
        for indices in order:
            yield place_batch(self.placement, (self.images[indices % len(self.images)], self.labels[indices]))

    def _resident_batches(self, order):
        """Input "resident": the pool and the labels replicated on the devices, each step's
        indices (by index % pool, by index) placed as its batch is, all here, outside the clock;
        a step's batch is gathered on the devices."""
        handles = self.placement.handles
        pool = jax.device_put((self.images, self.labels), handles["replicated"])
        steps = [place_batch(self.placement, (indices % len(self.images), indices)) for indices in order]
        gather = jax.jit(lambda pool, step: (pool[0][step[0]], pool[1][step[1]]), out_shardings=handles["batch"])
        return (gather(pool, step) for step in steps)

    def train_step(self, batch):
        return self.training(*batch)

    def eval_inputs(self, paths):
        """The images of `paths` decoded and centre-cropped by grain, as NCHW float32 batches:
        the next round of the evaluation loader, or (an evaluation out of its plan) a loader of
        its own."""
        n, loader, own = self.eval_batches(len(paths)), getattr(self, "eval_loader", None), False
        if loader is None or loader.rounds_left[:1] != [n] or loader.unread:
            loader = Feed(self.placement, [n], self.spec.workers, "chestxray-eval").start(self.eval_load())
            own = True
        try:
            yield from loader.round(np.asarray([str(p) for p in paths]))
        finally:
            if own:
                loader.close()

    def to_model_layout(self, inputs):
        return to_nhwc(inputs)


WORKLOAD = JaxChestXray
