"""The product in MXNet: mx.nd.dot (the engine runs it asynchronously; the block's sync waits).
mxnet is imported inside the methods: its thread pools read the variables the adapter's setup
sets, once, at import."""
from dlbench.frameworks import mxnet as adapter
from dlbench.contract import Steps
from dlbench.studies.matmul.task import Matmul


class MxnetMatmul(Matmul, Steps):
    def on_device(self, *arrays):
        import mxnet as mx

        return tuple(mx.nd.array(a, ctx=adapter.contexts(self.placement)[0], dtype="float32") for a in arrays)

    def product_sum(self, left, right):
        import mxnet as mx

        return mx.nd.dot(left, right).sum()


WORKLOAD = MxnetMatmul
