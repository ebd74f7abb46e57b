"""The product in Chainer: chainer.functions.matmul (numpy's BLAS on a CPU, CuPy's on a GPU)."""
import chainer.functions as F

from dlbench.frameworks import chainer as adapter
from dlbench.contract import Steps
from dlbench.studies.matmul.task import Matmul


class ChainerMatmul(Matmul, Steps):
    def on_device(self, *arrays):
        return tuple(adapter.device(self.placement).send(a) for a in arrays)

    def product_sum(self, left, right):
        return F.sum(F.matmul(left, right)).array


WORKLOAD = ChainerMatmul
