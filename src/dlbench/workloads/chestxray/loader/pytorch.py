"""The PyTorch ChestX-ray training loader alone: the DataLoader of the ChestX-ray workload
(PIL decode, shared crop and flip, normalise; persistent workers), batches moved to the device."""
from dlbench.frameworks import pytorch as adapter
from dlbench.workloads.chestxray.pytorch import train_loader
from dlbench.contract import Steps
from dlbench.workloads.chestxray.loader.task import ChestXrayLoader


class PyTorchChestXrayLoader(ChestXrayLoader, Steps):
    def build_training(self):
        self.loader, self.sampler = train_loader(self.train_paths, self.train_labels, self.spec,
                                                 pin_memory=self.placement.device_kind == "gpu")

    def batches(self, order, epochs):
        self.sampler.set_order(order, epochs)
        return adapter.on_device(self.loader, self.placement)


WORKLOAD = PyTorchChestXrayLoader
