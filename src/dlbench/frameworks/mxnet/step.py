"""MXNet's step: Adam in a Gluon Trainer over every context, one data-parallel step (`train_step`),
and what every MXNet workload module does the same way with them (`WorkloadMethods`). mxnet is
imported inside the functions (see the backend's docstring)."""
import numpy as np

from dlbench.frameworks.mxnet import contexts


def make_trainer(params, optimizer, placement, learning_rate=None):
    """Adam (spec.optimizer; learning_rate, if given, instead of its rate) over the parameters
    of every context, the gradients summed in a KVStore."""
    import mxnet as mx

    return mx.gluon.Trainer(params, "adam",
                            {"learning_rate": optimizer.lr if learning_rate is None else learning_rate,
                             "beta1": optimizer.beta1, "beta2": optimizer.beta2, "epsilon": optimizer.eps},
                            kvstore="device" if placement.device_kind == "gpu" else "local")


def train_step(net, loss_fn, trainer, placement, inputs, labels):
    """One data-parallel step over the contexts: the batch split evenly (context i takes the
    i-th contiguous slice), forward and backward on each, one update of the summed gradients.
    Returns the batch's mean loss, an NDArray on the first context (nothing is read)."""
    from mxnet import autograd, gluon, nd

    ctx = contexts(placement)
    xs = gluon.utils.split_and_load(inputs, ctx)
    ys = gluon.utils.split_and_load(labels, ctx)
    with autograd.record():
        losses = [loss_fn(net(x), y) for x, y in zip(xs, ys)]
    autograd.backward(losses)
    batch = inputs.shape[0]
    trainer.step(batch)  # the gradients are sums over the batch
    return nd.add_n(*[loss.sum().as_in_context(ctx[0]) for loss in losses]) / batch


class WorkloadMethods:
    """What every MXNet workload module does the same way with its self.model (a hybridized
    Gluon block), self.loss_fn and self.trainer (make_trainer): the data-parallel step of a
    batch (inputs, labels), the learning rate, the parameter count."""

    def train_step(self, batch):
        inputs, labels = batch
        return train_step(self.model, self.loss_fn, self.trainer, self.placement, inputs, labels)

    def set_learning_rate(self, lr):
        self.trainer.set_learning_rate(lr)

    def parameter_count(self):
        return sum(int(np.prod(p.shape)) for p in self.model.collect_params().values() if p.grad_req != "null")
