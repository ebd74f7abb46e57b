"""Chainer's step: Adam set up on the model (wrapped by ChainerMN's multi-node optimizer in a
chainermn run), one train step, and what every Chainer workload module does the same way with
them (`WorkloadMethods`); loading PyTorch's arrays into links (`assign`); the proof of the
precision (`ComputeOps`, `WorkloadMethods.precision_ops`)."""
import chainer
import numpy as np
from chainer.utils.conv import get_conv_outsize

from dlbench import precision
from dlbench.frameworks.chainer import communicator, device


def mixed16():
    """Whether Chainer computes in mixed16 (the adapter's setup sets it: mixed-float16 on a GPU)."""
    return chainer.config.dtype is chainer.mixed16


def make_optimizer(model, optimizer, placement, learning_rate=None):
    """Adam (spec.optimizer; learning_rate, if given, instead of its rate), set up on the model.

    In a chainermn run, ChainerMN's multi-node optimizer: each update first averages the ranks'
    gradients (MPI allreduce), so every rank applies the global batch's update. Its first
    update() would only broadcast rank 0's parameters and skip the step (it does so whenever the
    model's parameter set has changed since the last update, starting with the first): the
    broadcast is done here, before training (every rank loaded the shared start already), and
    is_changed records the parameter set, so that the run's first step is a real one, as in a
    single process."""
    adam = chainer.optimizers.Adam(alpha=optimizer.lr if learning_rate is None else learning_rate,
                                   beta1=optimizer.beta1, beta2=optimizer.beta2, eps=optimizer.eps)
    comm = communicator(placement)
    if comm is None:
        adam.setup(model)
        return mixed16_training(adam)
    import chainermn

    multi_node = chainermn.create_multi_node_optimizer(adam, comm)
    multi_node.setup(model)
    mixed16_training(adam)
    comm.bcast_data(model)
    multi_node.is_changed(model)
    return multi_node


def mixed16_training(adam):
    """Under mixed16 (float16 parameters but batch normalisation's): float32 master copies of the
    parameters, updated with float32 Adam state (use_fp32_update), and dynamic loss scaling
    (loss_scaling(): the loss scaled in backward, from 1; a step of non-finite gradients skipped
    and the scale halved; else doubled each step until the first such step, then 2**(1/1000)
    times a step, at most 65504). float32: Adam as it is."""
    if mixed16():
        adam.use_fp32_update()
        adam.loss_scaling()
    return adam


def loss_scaled(optimizer):
    """Whether the optimizer scales the loss (its loss_scaling: Chainer keeps the scale in _loss_scale)."""
    optimizer = getattr(optimizer, "actual_optimizer", optimizer)  # chainermn's wraps it
    return optimizer._loss_scale is not None


# FLOPs (2 x multiply-adds) of Chainer's compute functions, from their inputs: a convolution's output
# size from its own stride, padding and dilation; the LSTM's cuDNN node (GPUs) from its packed inputs
# (on a CPU n_step_lstm runs two LinearFunctions a step, recorded as such).
def _convolution_flops(node, x, w, *bias):
    out_h = get_conv_outsize(x.shape[2], w.shape[2], node.sy, node.ph, node.cover_all, node.dy)
    out_w = get_conv_outsize(x.shape[3], w.shape[3], node.sx, node.pw, node.cover_all, node.dx)
    return 2.0 * x.shape[0] * w.shape[0] * out_h * out_w * int(np.prod(w.shape[1:]))


def _linear_flops(node, x, w, *bias):
    return 2.0 * (x.size // x.shape[-1]) * w.shape[0] * w.shape[1]


def _lstm_flops(node, hx, cx, w, xs):
    hidden, steps = hx.shape[-1], xs.shape[0]
    inputs = xs.shape[1]
    return 2.0 * steps * 4 * hidden * ((inputs + hidden) + (node.n_layers - 1) * 2 * hidden)


COMPUTE = {"Convolution2DFunction": _convolution_flops, "LinearFunction": _linear_flops, "NStepLSTM": _lstm_flops}


class ComputeOps(chainer.FunctionHook):
    """Records each compute function Chainer runs in its scope (a FunctionHook: every function
    node's forward, with its inputs): dlbench.precision.op with the dtype of the inputs it
    multiplied (the widest where they differ) and its FLOPs."""

    name = "ComputeOps"

    def __init__(self):
        self.ops = []

    def forward_preprocess(self, function, in_data):
        flops = COMPUTE.get(function.label)
        if flops is None:
            return
        multiplied = [np.dtype(array.dtype) for array in in_data[:2]]
        dtype = max(multiplied, key=lambda d: d.itemsize)
        self.ops.append(precision.op(function.label, dtype.name, flops(function, *in_data)))


def assign(target, value, name):
    """Copy a numpy array into a Parameter or a persistent array (batch-norm statistics) of the
    same shape, on the target's device."""
    array = target.array if isinstance(target, chainer.Variable) else target
    if tuple(array.shape) != tuple(value.shape):
        raise ValueError(f"{name} has shape {value.shape}, the Chainer array {array.shape}")
    array[...] = chainer.backend.get_device_from_array(array).send(np.asarray(value, dtype=array.dtype))


class WorkloadMethods:
    """What every Chainer workload module does the same way with its self.model (a chainer.Chain
    on the placement's device), self.loss_fn and self.optimizer (make_optimizer): one step,
    the learning rate, predictions in test mode without a graph, the parameter count."""

    def train_step(self, batch):
        inputs, labels = batch
        loss = self.loss_fn(self.outputs(inputs), labels)
        if mixed16():  # update(lossfun): cleargrads, backward with the loss scale (loss_scaling), update
            self.optimizer.update(lambda: loss)
        else:
            self.model.cleargrads()
            loss.backward()
            self.optimizer.update()  # chainermn: the ranks' gradients averaged first
        return loss.array  # on the device; read by the protocol after the sync

    def outputs(self, inputs):
        """The model's outputs; under mixed16 of float16 inputs (floating inputs cast at the model's
        entry), cast to float32 for the loss."""
        if not mixed16():
            return self.model(inputs)
        if inputs.dtype.kind == "f":
            inputs = inputs.astype(np.float16)
        return chainer.functions.cast(self.model(inputs), np.float32)

    def precision_ops(self, inputs):
        """The compute functions of the prediction's forward pass as Chainer ran them (ComputeOps),
        and whether the optimizer scales the loss."""
        with ComputeOps() as hook:
            self.predict(inputs)
        return hook.ops, loss_scaled(self.optimizer)

    def set_learning_rate(self, lr):
        self.optimizer.alpha = lr

    def predict(self, inputs):
        with chainer.using_config("train", False), chainer.no_backprop_mode():
            outputs = self.outputs(device(self.placement).send(inputs.astype(self.input_dtype, copy=False)))
        return chainer.backend.CpuDevice().send(outputs.array)

    input_dtype = "float32"  # of the numpy inputs predict() receives

    def parameter_count(self):
        return sum(param.size for param in self.model.params())
