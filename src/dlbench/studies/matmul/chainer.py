"""The product in Chainer: chainer.functions.matmul (numpy's BLAS on a CPU, CuPy's on a GPU), its
operands in the run's precision (Chainer has no bfloat16: not applicable before it starts; float16
on GPUs only: the adapter's check). The proof: the dtype of the product it returned."""
import chainer.functions as F

from dlbench.frameworks import chainer as adapter
from dlbench.contract import Steps
from dlbench.studies.matmul.task import Matmul


class ChainerMatmul(Matmul, Steps):
    def on_device(self, *arrays):
        return tuple(adapter.device(self.placement).send(a.astype(self.compute_dtype)) for a in arrays)

    def product_sum(self, left, right):
        return F.sum(F.matmul(left, right)).array

    def product_dtype(self, left, right):
        return str(F.matmul(left, right).array.dtype)


WORKLOAD = ChainerMatmul
