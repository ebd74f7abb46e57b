"""The ChestX-ray training loader of Chainer alone: the dataset and MultiprocessIterator of the
DenseNet-121 workload (Pillow decode, crop and flip from the shared seed, normalise) with
`workers` worker processes, each batch concatenated onto the device; no model."""
from dlbench.frameworks import chainer as adapter
from dlbench.frameworks.chainer.loaders import started
from dlbench.workloads.chestxray.chainer import on_device, training_iterator
from dlbench.contract import Steps
from dlbench.workloads.chestxray.loader.task import ChestXrayLoader


class ChainerChestXrayLoader(ChestXrayLoader, Steps):
    def build_training(self):
        self.train_set, self.iterator = training_iterator(self)

    def batches(self, order, epochs):
        self.train_set.set_order(order, epochs)
        return on_device(started(self.iterator, self.spec.workers), adapter.device(self.placement))


WORKLOAD = ChainerChestXrayLoader
