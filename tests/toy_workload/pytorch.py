"""Logistic regression in PyTorch."""
import torch
from torch import nn

from dlbench.contract import Steps
from dlbench.frameworks import pytorch as adapter
from dlbench.frameworks.pytorch.step import WorkloadMethods
from dlbench.workloads.toy.task import Toy


class Linear(nn.Module):
    def __init__(self, features, classes):
        super().__init__()
        self.linear = nn.Linear(features, classes)

    def forward(self, x):
        return self.linear(x)


class PyTorchToy(WorkloadMethods, Toy, Steps):
    def build_model(self):
        self.device = adapter.device(self.placement)
        self.model = Linear(self.spec.model.features, self.spec.model.classes).to(self.device)

    def build_training(self):
        self.net = adapter.wrap(self.model, self.placement)
        opt = self.spec.optimizer
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=opt.lr, betas=(opt.beta1, opt.beta2), eps=opt.eps)
        self.loss_fn = nn.CrossEntropyLoss()
        self.x, self.y = torch.from_numpy(self.train_x), torch.from_numpy(self.train_y)

    def batches(self, order, epochs):
        return ((self.x[indices].to(self.device), self.y[indices].to(self.device))
                for indices in map(torch.from_numpy, order))

    def train_step(self, batch):
        x, y = batch
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.net(x), y)
        loss.backward()
        self.optimizer.step()
        return loss.detach()


WORKLOAD = PyTorchToy
