"""MNIST CNNs in PyTorch: one device, DistributedDataParallel (gloo/nccl), DataParallel."""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from dlbench.contract import Steps
from dlbench.frameworks import pytorch as adapter
from dlbench.frameworks.pytorch.step import WorkloadMethods
from dlbench.workloads.mnist.task import Mnist


def build_model(name):
    """The models every framework builds; 402,442 and 4,104,202 parameters."""
    if name == "small":
        return nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
            nn.Linear(32 * 14 * 14, 64), nn.ReLU(), nn.Linear(64, 10),
        )
    if name == "large":
        return nn.Sequential(
            nn.Conv2d(1, 128, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(128, 256, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(256, 512, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
            nn.Linear(512 * 3 * 3, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10),
        )
    raise ValueError(f"unknown model {name!r}")


class PyTorchMnist(WorkloadMethods, Mnist, Steps):
    def build_model(self):
        torch.manual_seed(self.spec.seed)  # the same initial weights on every rank
        self.device = adapter.device(self.placement)
        self.model = build_model(self.spec.model.name).to(self.device)

    def build_training(self):
        self.net = adapter.wrap(self.model, self.placement)
        opt = self.spec.optimizer
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=opt.lr, betas=(opt.beta1, opt.beta2), eps=opt.eps)
        self.loss_fn = nn.CrossEntropyLoss()
        self.train_set = TensorDataset(torch.from_numpy(self.train_images), torch.from_numpy(self.train_labels))

    def batches(self, order, epochs):
        # A DataLoader over index batches: each batch is one vectorised gather (TensorDataset[index]).
        loader = DataLoader(self.train_set, sampler=[torch.from_numpy(b) for b in order], batch_size=None,
                            pin_memory=self.placement.device_kind == "gpu")
        return adapter.on_device(loader, self.placement)

    def train_step(self, batch):
        images, labels = batch
        self.optimizer.zero_grad(set_to_none=True)
        with self.autocast():
            loss = self.loss_fn(self.net(images), labels)
        self.backward_step(loss, self.optimizer)
        return loss.detach()


WORKLOAD = PyTorchMnist
