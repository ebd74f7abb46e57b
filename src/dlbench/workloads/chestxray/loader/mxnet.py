"""The ChestX-ray training loader of MXNet alone: the Gluon Dataset and DataLoader of the
DenseNet-121 workload (mx.image.imread, crop and flip from the shared seed, normalise) with
`workers` worker processes, each batch moved to the context; no model."""
from dlbench.frameworks import mxnet as adapter
from dlbench.workloads.chestxray.mxnet import training_loader
from dlbench.contract import Steps
from dlbench.workloads.chestxray.loader.task import ChestXrayLoader


class MXNetChestXrayLoader(ChestXrayLoader, Steps):
    def build_training(self):
        self.ctx = adapter.contexts(self.placement)[0]
        self.sampler, self.loader = training_loader(self)

    def batches(self, order, epochs):
        self.sampler.set_order(order, epochs)
        return ((images.as_in_context(self.ctx), labels.as_in_context(self.ctx)) for images, labels in self.loader)


WORKLOAD = MXNetChestXrayLoader
