"""The product in MXNet: mx.nd.dot (the engine runs it asynchronously; the block's sync waits), its
operands in the run's precision (cast by AMP's mx.nd.amp_cast). MXNet 1.9's dot has no bfloat16 on a
CPU ("dot only supports float32/float64 for CPU"): a bfloat16 product is FullyConnected's, the
operator AMP sends to bfloat16 (oneDNN's bfloat16 GEMM), left times right transposed, the same
2 size^3 FLOPs. The proof: the dtype of the product it returned. mxnet is imported inside the
methods: its thread pools read the variables the adapter's setup sets, once, at import."""
from dlbench.frameworks import mxnet as adapter
from dlbench.contract import Steps
from dlbench.studies.matmul.task import Matmul


class MxnetMatmul(Matmul, Steps):
    def on_device(self, *arrays):
        import mxnet as mx
        from mxnet.contrib.amp.amp import bfloat16  # MXNet's bfloat16: a numpy record of one uint16

        operands = tuple(mx.nd.array(a, ctx=adapter.contexts(self.placement)[0], dtype="float32") for a in arrays)
        if self.compute_dtype == "float32":
            return operands
        dtype = bfloat16 if self.compute_dtype == "bfloat16" else self.compute_dtype
        return tuple(mx.nd.amp_cast(a, dtype=dtype) for a in operands)

    def product(self, left, right):
        import mxnet as mx

        if self.compute_dtype == "bfloat16":
            return mx.nd.FullyConnected(left, right, no_bias=True, num_hidden=right.shape[0])
        return mx.nd.dot(left, right)

    def product_sum(self, left, right):
        return self.product(left, right).sum()

    def product_dtype(self, left, right):
        import mxnet as mx

        product = self.product(left, right)
        mx.nd.waitall()
        return adapter._dtype_name(product.dtype)


WORKLOAD = MxnetMatmul
