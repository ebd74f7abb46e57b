"""The ChestX-ray training loader of JAX alone: the grain loader of the DenseNet-121 workload
(dlbench.frameworks.jax.loaders.Feed over TrainBatch: PIL decode, the shared seed's crop and flip,
normalise; `workers` persistent worker processes, or the consuming thread) over the run's order,
each batch placed on the device (jax.device_put); no model.

The step takes the batch only: it hands it to the adapter, whose sync waits for the block's
last transfer before the clock stops (the transfers are asynchronous, and nothing else waits
for them).
"""
from dlbench.frameworks import jax as adapter
from dlbench.frameworks.jax.loaders import feed_order, order_feed
from dlbench.workloads.chestxray.jax import TrainBatch
from dlbench.contract import Steps
from dlbench.workloads.chestxray.loader.task import ChestXrayLoader


class JaxChestXrayLoader(ChestXrayLoader, Steps):
    def build_training(self):
        spec = self.spec
        self.loader = order_feed(self.placement, spec, "chestxray-loader")
        self.loader.start(TrainBatch(self.train_paths, self.train_labels, spec.seed, spec.data.crop))

    def batches(self, order, epochs):
        return feed_order(self.placement, self.loader, order, epochs)

    def train_step(self, batch):
        """No loss: the batch is on its way to the device, that is all a loader does."""
        adapter.hold(self.placement, batch)


WORKLOAD = JaxChestXrayLoader
