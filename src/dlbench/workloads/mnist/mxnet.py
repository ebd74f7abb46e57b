"""MNIST CNNs in MXNet Gluon: one context, or data parallel over N contexts of one process
(the Trainer sums the contexts' gradients in a KVStore) or of one process a node (a dist_sync
kvstore sums every node's).

mxnet is imported inside the functions: its thread pools read the thread variables that the
adapter's setup sets, once, at import.
"""

from dlbench.frameworks import mxnet as adapter
from dlbench.contract import Steps
from dlbench.frameworks.mxnet.step import WorkloadMethods, make_trainer
from dlbench.workloads.mnist.task import Mnist


def build_model(name):
    """The models every framework builds; 402,442 and 4,104,202 parameters."""
    from mxnet.gluon import nn

    net = nn.HybridSequential()
    if name == "small":
        net.add(
            nn.Conv2D(32, 3, padding=1, in_channels=1, activation="relu"), nn.MaxPool2D(2), nn.Flatten(),
            nn.Dense(64, in_units=32 * 14 * 14, activation="relu"), nn.Dense(10, in_units=64),
        )
    elif name == "large":
        net.add(
            nn.Conv2D(128, 3, padding=1, in_channels=1, activation="relu"), nn.MaxPool2D(2),
            nn.Conv2D(256, 3, padding=1, in_channels=128, activation="relu"), nn.MaxPool2D(2),
            nn.Conv2D(512, 3, padding=1, in_channels=256, activation="relu"), nn.MaxPool2D(2), nn.Flatten(),
            nn.Dense(512, in_units=512 * 3 * 3, activation="relu"), nn.Dense(512, in_units=512, activation="relu"),
            nn.Dense(10, in_units=512),
        )
    else:
        raise ValueError(f"unknown model {name!r}")
    return net


def torch_order(name):
    """(layer index, weight before bias) of a PyTorch nn.Sequential parameter name."""
    index, kind = name.split(".")
    return int(index), ("weight", "bias").index(kind)


class MXNetMnist(WorkloadMethods, Mnist, Steps):
    def build_model(self):
        import mxnet as mx

        self.contexts = adapter.contexts(self.placement)
        mx.random.seed(self.spec.seed)
        self.model = build_model(self.spec.model.name)
        # On every context; the values are replaced by the shared start (Workload.build).
        self.model.initialize(mx.init.Xavier(), ctx=self.contexts)
        self.apply_mode()

    def build_training(self):
        import mxnet as mx
        from mxnet import gluon

        self.trainer = make_trainer(self.model.collect_params(), self.spec.optimizer, self.placement,
                                    loss_scaling=self.loss_scaling)
        self.loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
        # The training split in this process's memory (shared with the numpy arrays, not
        # copied); labels as float, as SoftmaxCrossEntropyLoss and argmax's output are in MXNet.
        self.images = mx.nd.from_numpy(self.train_images, zero_copy=True)
        self.labels = mx.nd.array(self.train_labels, dtype="float32")

    def batches(self, order, epochs):
        import mxnet as mx

        indices = mx.nd.array(order, dtype="int64")
        # One vectorised gather per batch (take along the sample axis), in this process, when
        # the step asks for it: the generator reads only as far as the run goes.
        return ((mx.nd.take(self.images, indices[i]), mx.nd.take(self.labels, indices[i]))
                for i in range(len(order)))

    def load_weights(self, weights):
        """PyTorch's layouts are MXNet's (OIHW kernels, Dense (out, in), NCHW flatten): the
        parameters map one to one, in order."""
        import mxnet as mx

        names = sorted(weights, key=torch_order)
        params = list(self.model.collect_params().values())
        if len(names) != len(params):
            raise ValueError(f"{len(names)} PyTorch arrays for {len(params)} Gluon parameters")
        for name, param in zip(names, params):
            if tuple(weights[name].shape) != tuple(param.shape):
                raise ValueError(f"{name} has shape {weights[name].shape}, {param.name} {param.shape}")
            param.set_data(mx.nd.array(weights[name], dtype="float32"))


WORKLOAD = MXNetMnist
