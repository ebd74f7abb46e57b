"""MXNet's step: Adam in a Gluon Trainer over every context, one data-parallel step (`train_step`),
and what every MXNet workload module does the same way with them (`WorkloadMethods`). mxnet is
imported inside the functions (see the adapter's docstring)."""
import warnings

import numpy as np

from dlbench.frameworks.mxnet import contexts, kvstore


def make_trainer(params, optimizer, placement, learning_rate=None):
    """Adam (spec.optimizer; learning_rate, if given, instead of its rate) over the parameters
    of every context, the gradients summed in a KVStore: this process's, or across nodes the
    run's dist_sync kvstore, whose servers only sum (each worker applies the update)."""
    import mxnet as mx

    adam = {"learning_rate": optimizer.lr if learning_rate is None else learning_rate,
            "beta1": optimizer.beta1, "beta2": optimizer.beta2, "epsilon": optimizer.eps}
    if kvstore(placement) is None:
        return mx.gluon.Trainer(params, "adam", adam, kvstore="device" if placement.device_kind == "gpu" else "local")
    # Not updated on the kvstore: its servers would run a pickled copy of the optimizer, which
    # set_learning_rate does not reach, and they could not sum mean_over_processes' values.
    trainer = mx.gluon.Trainer(params, "adam", adam, kvstore=kvstore(placement), update_on_kvstore=False)
    # The Trainer's first call puts the parameters in the kvstore and pulls them back; in a
    # step, that pull races the first gradients' pushpull on the same keys (the servers may
    # answer it with the gradients' sum). Make that call now, every gradient stale (no
    # update), and wait for it.
    trainer.update(1, ignore_stale_grad=True)
    mx.nd.waitall()
    return trainer


def train_step(net, loss_fn, trainer, placement, inputs, labels):
    """One data-parallel step over the contexts: the batch (this process's slice of the global
    batch) split evenly (context i takes the i-th contiguous slice), forward and backward on
    each, one update of the gradients summed over every process's contexts. Returns the
    batch's mean loss, an NDArray on the first context (nothing is read)."""
    from mxnet import autograd, gluon, nd

    ctx = contexts(placement)
    xs = gluon.utils.split_and_load(inputs, ctx)
    ys = gluon.utils.split_and_load(labels, ctx)
    with autograd.record():
        losses = [loss_fn(net(x), y) for x, y in zip(xs, ys)]
    autograd.backward(losses)
    batch = inputs.shape[0]
    trainer.step(batch * placement.processes)  # the gradients are sums over the global batch
    return nd.add_n(*[loss.sum().as_in_context(ctx[0]) for loss in losses]) / batch


class WorkloadMethods:
    """What every MXNet workload module does the same way with its self.model (a Gluon
    HybridBlock), self.loss_fn and self.trainer (make_trainer): the run's execution mode, the
    data-parallel step of a batch (inputs, labels), predictions, the learning rate, the
    parameter count."""

    def apply_mode(self):
        """The run's mode (spec.mode) on self.model, once its parameters have their shapes.

        "hybrid": the model is hybridized with static_alloc and static_shape: one static graph,
        its memory planned once, for the training step's fixed batch shape (on each context).
        Evaluation goes through self.eval_model, a second graph of the same Parameters
        hybridized with static_alloc only: its batches (and the last, smaller one) have other
        shapes, and the training graph re-plans when its input shapes or its recording
        (training) state change, so sharing one graph would re-plan it inside the timed
        segment after every evaluation. "imperative": no hybridize, Gluon's op-by-op
        execution, for training and evaluation."""
        import mxnet as mx

        self.eval_model = self.model
        if self.spec.mode == "hybrid":
            data = mx.sym.var("data")
            with warnings.catch_warnings():  # the input's type is unknown until a call gives one
                warnings.filterwarnings("ignore", "Cannot decide type", UserWarning)
                self.eval_model = mx.gluon.SymbolBlock(self.model(data), data, params=self.model.collect_params())
            self.eval_model.hybridize(static_alloc=True)
            self.model.hybridize(static_alloc=True, static_shape=True)
        elif self.spec.mode != "imperative":
            raise ValueError(f"MXNet has no mode {self.spec.mode!r}")

    def predict(self, inputs):
        """Outputs for a numpy batch (float32 images or int64 token ids), on the first context."""
        import mxnet as mx

        inputs = mx.nd.array(inputs, ctx=contexts(self.placement)[0], dtype=inputs.dtype)
        return self.eval_model(inputs).asnumpy()

    def train_step(self, batch):
        inputs, labels = batch
        return train_step(self.model, self.loss_fn, self.trainer, self.placement, inputs, labels)

    def set_learning_rate(self, lr):
        self.trainer.set_learning_rate(lr)

    def parameter_count(self):
        return sum(int(np.prod(p.shape)) for p in self.model.collect_params().values() if p.grad_req != "null")
