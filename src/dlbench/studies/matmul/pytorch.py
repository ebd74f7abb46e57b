"""The product in PyTorch: torch.mm."""
import torch

from dlbench.frameworks import pytorch as adapter
from dlbench.contract import Steps
from dlbench.studies.matmul.task import Matmul


class PyTorchMatmul(Matmul, Steps):
    def on_device(self, *arrays):
        return tuple(torch.from_numpy(a).to(adapter.device(self.placement)) for a in arrays)

    def product_sum(self, left, right):
        return torch.mm(left, right).sum()


WORKLOAD = PyTorchMatmul
