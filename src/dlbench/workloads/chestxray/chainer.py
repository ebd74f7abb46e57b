"""DenseNet (chestxray.blocks; DenseNet-121 in the studies) on ChestX-ray14
in Chainer: DenseNet-BC written with chainer.links (Chainer
ships no DenseNet), with torchvision's layer names, 14 logits, sigmoid + binary cross-entropy,
Adam; one process, or data parallel over N MPI processes with ChainerMN.

Input "real": a Chainer dataset whose k-th example is the k-th sample of the run's order (its
step's epoch, its index), decoded with Pillow and cropped, flipped and normalised by the shared
code (dlbench.workloads.chestxray.images, as PyTorch's loader), through a MultiprocessIterator
with `workers` worker processes (SerialIterator with 0), iterated once over the run's order.
Input "synthetic": the task's random tensors, gathered by index in this process and sent to
the device each step. Input "resident": the same tensors, labels and the run's order sent to the
device once, outside the clock, each batch gathered there (its array module's indexing).
Chainer has no GPU build here (docs/environments.md, "GPUs"): its device is the CPU, where nothing is copied
either way, and no GPU idiom (a CuPy stream copying ahead) is written. Evaluation reads the
real images (centre crop) in every input through an iterator of its own.
"""
from pathlib import Path

import chainer
import chainer.functions as F
import chainer.links as L
import numpy as np

from dlbench.errors import DataError
from dlbench.frameworks import chainer as adapter
from dlbench.frameworks.chainer.loaders import iterator, started
from dlbench.contract import Steps
from dlbench.frameworks.chainer.step import WorkloadMethods, assign, make_optimizer
from dlbench.workloads.chestxray.images import eval_transform, read_image, sample_rng, train_transform
from dlbench.workloads.chestxray.task import ChestXray


def batch_norm(size):
    """PyTorch's batch normalisation: epsilon 1e-5 (Chainer's default is 2e-5) and momentum 0.1
    (decay 0.9, the old running value's weight); the running variance from the unbiased batch
    variance, as PyTorch's."""
    return L.BatchNormalization(size, decay=0.9, eps=1e-5)


# --- the model: DenseNet-BC with torchvision's layer names ------------------------------------

class DenseLayer(chainer.Chain):
    """BN-ReLU-conv1x1 (bottleneck x growth channels), BN-ReLU-conv3x3 (growth channels)."""

    def __init__(self, in_features, growth, bottleneck):
        super().__init__()
        with self.init_scope():
            self.norm1 = batch_norm(in_features)
            self.conv1 = L.Convolution2D(in_features, bottleneck * growth, 1, nobias=True)
            self.norm2 = batch_norm(bottleneck * growth)
            self.conv2 = L.Convolution2D(bottleneck * growth, growth, 3, pad=1, nobias=True)

    def forward(self, features):
        bottleneck = self.conv1(F.relu(self.norm1(F.concat(features, axis=1))))
        return self.conv2(F.relu(self.norm2(bottleneck)))


class DenseBlock(chainer.Chain):
    def __init__(self, layers, in_features, growth, bottleneck):
        super().__init__()
        self.layers = [f"denselayer{i + 1}" for i in range(layers)]
        with self.init_scope():
            for i, name in enumerate(self.layers):
                setattr(self, name, DenseLayer(in_features + i * growth, growth, bottleneck))

    def forward(self, x):
        features = [x]
        for name in self.layers:
            features.append(self[name](features))
        return F.concat(features, axis=1)


class Transition(chainer.Chain):
    """BN-ReLU-conv1x1 (compression) and 2x2 average pooling."""

    def __init__(self, in_features, out_features):
        super().__init__()
        with self.init_scope():
            self.norm = batch_norm(in_features)
            self.conv = L.Convolution2D(in_features, out_features, 1, nobias=True)

    def forward(self, x):
        return F.average_pooling_2d(self.conv(F.relu(self.norm(x))), 2)


class Features(chainer.Chain):
    """conv 7x7/2, BN, ReLU, max pool 3x3/2, dense blocks and transitions, the final BN."""

    def __init__(self, blocks, growth, bottleneck, compression, init_features):
        super().__init__()
        self.stages = []
        with self.init_scope():
            self.conv0 = L.Convolution2D(3, init_features, 7, stride=2, pad=3, nobias=True)
            self.norm0 = batch_norm(init_features)
            features = init_features
            for i, layers in enumerate(blocks):
                setattr(self, f"denseblock{i + 1}", DenseBlock(layers, features, growth, bottleneck))
                self.stages.append(f"denseblock{i + 1}")
                features += layers * growth
                if i != len(blocks) - 1:
                    setattr(self, f"transition{i + 1}", Transition(features, int(features * compression)))
                    self.stages.append(f"transition{i + 1}")
                    features = int(features * compression)
            self.norm5 = batch_norm(features)
        self.out_features = features

    def forward(self, x):
        # cover_all=False: PyTorch's output size (112 -> 56), not Chainer's default (57)
        h = F.max_pooling_2d(F.relu(self.norm0(self.conv0(x))), 3, stride=2, pad=1, cover_all=False)
        for name in self.stages:
            h = self[name](h)
        return self.norm5(h)


class DenseNet(chainer.Chain):
    """features, ReLU, global average pooling, a linear classifier of `classes` logits."""

    def __init__(self, classes, blocks, growth, bottleneck, compression, init_features):
        super().__init__()
        with self.init_scope():
            self.features = Features(blocks, growth, bottleneck, compression, init_features)
            self.classifier = L.Linear(self.features.out_features, classes)

    def forward(self, x):
        return self.classifier(F.average(F.relu(self.features(x)), axis=(2, 3)))


def build_model(model):
    """model: the spec's DenseNetModel (DenseNet-121: 6,968,206 parameters with 14 outputs)."""
    return DenseNet(model.classes, model.blocks, model.growth, model.bottleneck, model.compression,
                    model.init_features)


def load_imagenet_weights(model, path):
    """ImageNet weights from a Chainer npz file of this model (serializers.save_npz of a
    DenseNet here): everything under features/, not the classifier (14 outputs, not 1000)."""
    if not Path(path).is_file():
        raise DataError(f"{path}: no such weights file")
    try:
        chainer.serializers.load_npz(path, model.features, path="features/")
    except (KeyError, ValueError) as err:
        raise DataError(f"{path}: not DenseNet weights of this shape ({err})") from err


# PyTorch's array names -> a link's attribute (BatchNormalization's weight and bias are gamma
# and beta, its running statistics avg_mean and avg_var).
BATCH_NORM_NAMES = {"weight": "gamma", "bias": "beta", "running_mean": "avg_mean", "running_var": "avg_var"}
LINK_NAMES = {"weight": "W", "bias": "b"}


# --- data --------------------------------------------------------------------------------------

class TrainImages(chainer.dataset.DatasetMixin):
    """Example k: the k-th sample of the run's order (its step's epoch, its index), decoded with
    Pillow, randomly cropped and flipped (drawn from the seed, the epoch and the index: the same
    whichever worker loads it), normalised; with its labels (int32, as sigmoid_cross_entropy
    takes them). Empty until set_order."""

    def __init__(self, paths, labels, seed, crop):
        self.paths, self.labels, self.seed, self.crop = paths, labels.astype(np.int32), seed, crop
        self.indices, self.epochs = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)

    def set_order(self, order, epochs):
        self.indices, self.epochs = order.ravel(), np.repeat(epochs, order.shape[1])

    def __len__(self):
        return len(self.indices)

    def get_example(self, k):
        epoch, index = int(self.epochs[k]), int(self.indices[k])
        image = train_transform(read_image(self.paths[index], "pillow"), sample_rng(self.seed, epoch, index),
                                self.crop)
        return image, self.labels[index]


class EvalImages(chainer.dataset.DatasetMixin):
    """Decode with Pillow, centre crop, normalise."""

    def __init__(self, paths, crop):
        self.paths, self.crop = paths, crop

    def __len__(self):
        return len(self.paths)

    def get_example(self, i):
        return eval_transform(read_image(self.paths[i], "pillow"), self.crop)


def training_iterator(workload):
    """(dataset, iterator) over a workload's real training images (its train_paths and
    train_labels), spec.batch images a batch; set the dataset's order before iterating."""
    spec = workload.spec
    dataset = TrainImages(workload.train_paths, workload.train_labels, spec.seed, spec.data.crop)
    return dataset, iterator(workload.placement, dataset, spec.batch, spec.workers)


def on_device(batches, device):
    """Each iterator batch (a list of examples) as arrays on the device (concat_examples)."""
    return (chainer.dataset.concat_examples(batch, device) for batch in batches)


class ChainerChestXray(WorkloadMethods, ChestXray, Steps):
    def build_model(self):
        np.random.seed(self.spec.seed)  # Chainer's initializers draw from numpy's global generator
        self.model = build_model(self.spec.model)
        if self.spec.weights:
            load_imagenet_weights(self.model, self.spec.weights)
        self.model.to_device(adapter.device(self.placement))

    def build_training(self):
        # The base rate times the number of devices, as the study did.
        self.optimizer = make_optimizer(self.model, self.spec.optimizer, self.placement,
                                        learning_rate=self.learning_rate)
        self.loss_fn = F.sigmoid_cross_entropy  # the mean over the samples' 14 pathologies
        if self.spec.input == "real":
            self.train_set, self.iterator = training_iterator(self)
        else:  # in host memory (device input: the source of its one copy)
            self.images, self.labels = self.synthetic_images, self.synthetic_labels.astype(np.int32)

    def batches(self, order, epochs):
        device = adapter.device(self.placement)
        if self.spec.input == "synthetic":
            # This process's batches of the in-memory set, gathered by index (no iterator).
            return ((device.send(self.images[indices % len(self.images)]), device.send(self.labels[indices]))
                    for indices in order)
        if self.spec.input == "resident":
            images, labels, pooled, indices = device.send((self.images, self.labels, order % len(self.images), order))
            return ((images[pooled[step]], labels[indices[step]]) for step in range(len(order)))
        self.train_set.set_order(order, epochs)  # before the iterator's worker pool starts (forked with it)
        return on_device(started(self.iterator, self.spec.workers), device)

    def eval_inputs(self, paths):
        images = iterator(self.placement, EvalImages(paths, self.spec.data.crop), self.spec.batch, self.spec.workers)
        try:
            for batch in images:
                yield np.stack(batch)
        finally:
            images.finalize()

    def load_weights(self, weights):
        """torchvision's layouts are Chainer's (OIHW kernels, Linear (out, in)) and its names
        are the model's links: features.denseblock1.denselayer1.norm1.weight is the gamma of
        features/denseblock1/denselayer1/norm1. num_batches_tracked has no counterpart."""
        filled = set()
        for name, value in weights.items():
            *path, kind = name.split(".")
            if kind == "num_batches_tracked":
                continue
            link = self.model
            for part in path:
                link = getattr(link, part)
            names = BATCH_NORM_NAMES if isinstance(link, L.BatchNormalization) else LINK_NAMES
            assign(getattr(link, names[kind]), value, name)
            filled.add(f"/{'/'.join(path)}/{names[kind]}")
        missing = {name for name, _ in self.model.namedparams()} - filled
        if missing:
            raise ValueError(f"PyTorch's arrays leave {len(missing)} Chainer parameters unset, e.g. {sorted(missing)[:3]}")


WORKLOAD = ChainerChestXray
