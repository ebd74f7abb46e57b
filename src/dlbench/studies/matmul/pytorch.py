"""The product in PyTorch: torch.mm, its operands in the run's precision (the proof: the aten op as
it dispatched)."""
import torch

from dlbench.frameworks import pytorch as adapter
from dlbench.contract import Steps
from dlbench.studies.matmul.task import Matmul


class PyTorchMatmul(Matmul, Steps):
    def on_device(self, *arrays):
        dtype = getattr(torch, self.compute_dtype)
        return tuple(torch.from_numpy(a).to(adapter.device(self.placement)).to(dtype) for a in arrays)

    def product_sum(self, left, right):
        return torch.mm(left, right).sum()

    def product_ops(self, left, right):
        return adapter.forward_ops(torch.mm, left, right)


WORKLOAD = PyTorchMatmul
