"""MNIST CNNs in Chainer: one process, or data parallel over N MPI processes with ChainerMN
(the multi-node optimizer averages the ranks' gradients)."""
import chainer
import chainer.functions as F
import chainer.links as L
import numpy as np

from dlbench.frameworks import chainer as adapter
from dlbench.contract import Steps
from dlbench.frameworks.chainer.step import WorkloadMethods, assign, make_optimizer
from dlbench.workloads.mnist.task import Mnist

# (convolutions' output channels, dense layers' widths) of the models every framework builds.
MODELS = {"small": ((32,), (64, 10)), "large": ((128, 256, 512), (512, 512, 10))}


class CNN(chainer.Chain):
    """Conv 3x3 (padding 1) + ReLU + max-pool 2 per convolution, then dense layers with ReLU
    between them; 402,442 (small) and 4,104,202 (large) parameters. `layers` names the links
    in PyTorch's nn.Sequential order."""

    def __init__(self, channels, widths):
        super().__init__()
        self.layers = []
        with self.init_scope():
            in_channels, size = 1, 28
            for i, out_channels in enumerate(channels):
                setattr(self, f"conv{i + 1}", L.Convolution2D(in_channels, out_channels, 3, pad=1))
                self.layers.append(f"conv{i + 1}")
                in_channels, size = out_channels, size // 2
            in_units = in_channels * size * size  # L.Linear flattens N x C x H x W as PyTorch's Flatten
            for i, units in enumerate(widths):
                setattr(self, f"fc{i + 1}", L.Linear(in_units, units))
                self.layers.append(f"fc{i + 1}")
                in_units = units

    def forward(self, x):
        h = x
        for name in self.layers:
            if name.startswith("conv"):
                # cover_all=False: PyTorch's floor (7 -> 3), not Chainer's default ceil (7 -> 4)
                h = F.max_pooling_2d(F.relu(self[name](h)), 2, cover_all=False)
            else:
                h = self[name](h)
                if name != self.layers[-1]:
                    h = F.relu(h)
        return h


def build_model(name):
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}")
    return CNN(*MODELS[name])


class ChainerMnist(WorkloadMethods, Mnist, Steps):
    def build_model(self):
        np.random.seed(self.spec.seed)  # Chainer's initializers draw from numpy's global generator
        self.model = build_model(self.spec.model.name)
        self.model.to_device(adapter.device(self.placement))

    def build_training(self):
        self.optimizer = make_optimizer(self.model, self.spec.optimizer, self.placement)
        self.loss_fn = F.softmax_cross_entropy
        # The training split in memory; a TupleDataset indexed by an index array gathers a
        # whole batch in one vectorised step. Labels as int32, Chainer's label type.
        self.train_set = chainer.datasets.TupleDataset(self.train_images, self.train_labels.astype(np.int32))

    def batches(self, order, epochs):
        send = adapter.device(self.placement).send
        # One gather per batch, in this process, when the step asks for it.
        return (tuple(send(array) for array in self.train_set[indices]) for indices in order)

    def load_weights(self, weights):
        """PyTorch's layouts are Chainer's (OIHW kernels, Linear (out, in), NCHW flatten):
        nn.Sequential's layers with parameters, in order, are the model's links."""
        indices = sorted({int(name.split(".")[0]) for name in weights})
        if len(indices) != len(self.model.layers):
            raise ValueError(f"{len(indices)} PyTorch layers for {len(self.model.layers)} Chainer links")
        for index, layer in zip(indices, self.model.layers):
            link = self.model[layer]
            assign(link.W, weights[f"{index}.weight"], f"{index}.weight")
            assign(link.b, weights[f"{index}.bias"], f"{index}.bias")


WORKLOAD = ChainerMnist
