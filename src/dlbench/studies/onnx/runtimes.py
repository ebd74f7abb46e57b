"""The runtimes an exported model runs in, each in its own idiom and env: what differs between
them (load the model, put a batch where it computes, run it to completion). Each library is
imported when its runtime loads: the task imports this module in every env.

Every `run` returns when the outputs are computed, as a caller reading its predictions needs:
onnxruntime's and PyTorch's CPU calls are synchronous; MXNet's engine is not, so its run waits
for the output (wait_to_read).
"""
import os

from dlbench.errors import NotApplicable


class PyTorch:
    """The exported program (torch.export) in PyTorch itself: the reference. Its graph calls the
    same ATen kernels as the eager module it was exported from."""

    def load(self, spec):
        import torch

        torch.set_num_threads(spec.threads)
        self.torch = torch
        self.module = torch.export.load(spec.data.program).module()
        return torch.__version__

    def prepare(self, batch):
        return self.torch.from_numpy(batch)

    def run(self, inputs):
        with self.torch.inference_mode():
            return self.module(inputs)

    def to_numpy(self, outputs):
        return outputs.numpy()


class OnnxRuntime:
    """An onnxruntime InferenceSession on the CPU, its operators on the run's threads, one at a time."""

    def load(self, spec):
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = spec.threads
        options.inter_op_num_threads = 1
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        self.session = onnxruntime.InferenceSession(spec.data.onnx, options, providers=["CPUExecutionProvider"])
        self.input_name = self.session.get_inputs()[0].name
        return onnxruntime.__version__

    def prepare(self, batch):
        return batch

    def run(self, inputs):
        return self.session.run(None, {self.input_name: inputs})[0]

    def to_numpy(self, outputs):
        return outputs


class MXNet:
    """MXNet's ONNX importer (mxnet.contrib.onnx.import_to_gluon): a Gluon SymbolBlock,
    hybridized as the MXNet workload modules are."""

    def load(self, spec):
        # MXNet's thread pools read these once, when it loads (see dlbench.frameworks.mxnet).
        os.environ.update({"OMP_NUM_THREADS": str(spec.threads), "MXNET_CPU_WORKER_NTHREADS": "1"})
        import mxnet as mx
        import onnx
        from mxnet.contrib import onnx as onnx_mxnet
        from mxnet.contrib.onnx.onnx2mx._import_helper import _convert_map as translations

        self.mx = mx
        # The importer translates node by node and stops at the first operator it has no translation of,
        # or earlier, unexplained, at a later opset's form of one it has (an opset-13 Unsqueeze's axes, an
        # input: KeyError 'axes'): the graph's operators it has none for, named before it starts.
        untranslated = list(dict.fromkeys(node.op_type for node in onnx.load(spec.data.onnx).graph.node
                                          if node.op_type not in translations))
        if untranslated:
            raise NotApplicable(f"MXNet {mx.__version__}'s ONNX importer (mxnet.contrib.onnx) has no translation of "
                                f"the operator{'s' if len(untranslated) > 1 else ''} {', '.join(untranslated)}")
        self.net = onnx_mxnet.import_to_gluon(spec.data.onnx, ctx=mx.cpu())
        self.net.hybridize(static_alloc=True)
        return mx.__version__

    def prepare(self, batch):
        return self.mx.nd.array(batch, dtype=batch.dtype)

    def run(self, inputs):
        outputs = self.net(inputs)
        outputs.wait_to_read()
        return outputs

    def to_numpy(self, outputs):
        return outputs.asnumpy()


RUNTIMES = {"pytorch": PyTorch, "onnxruntime": OnnxRuntime, "mxnet": MXNet}
