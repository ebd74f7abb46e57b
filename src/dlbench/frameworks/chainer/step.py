"""Chainer's step: Adam set up on the model (wrapped by ChainerMN's multi-node optimizer in a
chainermn run), one train step, and what every Chainer workload module does the same way with
them (`WorkloadMethods`); loading PyTorch's arrays into links (`assign`)."""
import chainer
import numpy as np

from dlbench.frameworks.chainer import communicator, device


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
        return adam
    import chainermn

    multi_node = chainermn.create_multi_node_optimizer(adam, comm)
    multi_node.setup(model)
    comm.bcast_data(model)
    multi_node.is_changed(model)
    return multi_node


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
        loss = self.loss_fn(self.model(inputs), labels)
        self.model.cleargrads()
        loss.backward()
        self.optimizer.update()  # chainermn: the ranks' gradients averaged first
        return loss.array  # on the device; read by the protocol after the sync

    def set_learning_rate(self, lr):
        self.optimizer.alpha = lr

    def predict(self, inputs):
        with chainer.using_config("train", False), chainer.no_backprop_mode():
            outputs = self.model(device(self.placement).send(inputs.astype(self.input_dtype, copy=False)))
        return chainer.backend.CpuDevice().send(outputs.array)

    input_dtype = "float32"  # of the numpy inputs predict() receives

    def parameter_count(self):
        return sum(param.size for param in self.model.params())
