"""MXNet's step: Adam in a Gluon Trainer over every context, one data-parallel step (`train_step`),
and what every MXNet workload module does the same way with them (`WorkloadMethods`), the
precision policy (MXNet's AMP, mxnet.contrib.amp) included. mxnet is imported inside the
functions (see the adapter's docstring)."""
import warnings

import numpy as np

from dlbench.frameworks.mxnet import contexts, forward_ops, kvstore

AMP_DTYPES = {"mixed-bfloat16": "bfloat16", "mixed-float16": "float16"}  # AMP's target_dtype of a policy


def make_trainer(params, optimizer, placement, learning_rate=None, loss_scaling=False):
    """Adam (spec.optimizer; learning_rate, if given, instead of its rate) over the parameters
    of every context, the gradients summed in a KVStore: this process's, or across nodes the
    run's dist_sync kvstore, whose servers only sum (each worker applies the update). With
    loss_scaling (mixed-float16), AMP's dynamic loss scaler on it (amp.init_trainer: its step
    unscales the gradients and skips a step whose gradients overflowed)."""
    trainer = _make_trainer(params, optimizer, placement, learning_rate)
    if loss_scaling:
        from mxnet.contrib import amp

        amp.init_trainer(trainer)
    return trainer


def _make_trainer(params, optimizer, placement, learning_rate):
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


def train_step(net, loss_fn, trainer, placement, inputs, labels, loss_scaling=False):
    """One data-parallel step over the contexts: the batch (this process's slice of the global
    batch) split evenly (context i takes the i-th contiguous slice), forward and backward on
    each, one update of the gradients summed over every process's contexts (with loss_scaling,
    of the losses scaled by AMP's loss scaler). Returns the batch's mean loss, an NDArray on the
    first context (nothing is read)."""
    from mxnet import autograd, gluon, nd
    from mxnet.contrib import amp

    ctx = contexts(placement)
    xs = gluon.utils.split_and_load(inputs, ctx)
    ys = gluon.utils.split_and_load(labels, ctx)
    with autograd.record():
        losses = [loss_fn(net(x), y) for x, y in zip(xs, ys)]
        if loss_scaling:
            with amp.scale_loss(losses, trainer) as scaled:
                autograd.backward(scaled)
    if not loss_scaling:
        autograd.backward(losses)
    batch = inputs.shape[0]
    trainer.step(batch * placement.processes)  # the gradients are sums over the global batch
    return nd.add_n(*[loss.sum().as_in_context(ctx[0]) for loss in losses]) / batch


class WorkloadMethods:
    """What every MXNet workload module does the same way with its self.model (a Gluon
    HybridBlock), self.loss_fn and self.trainer (make_trainer, with loss_scaling=self.loss_scaling):
    the run's execution mode and precision, the data-parallel step of a batch (inputs, labels),
    predictions, the learning rate, the parameter count, the precision record's forward pass."""

    @property
    def loss_scaling(self):
        return AMP_DTYPES.get(self.applied_precision) == "float16"

    def apply_mode(self):
        """The run's precision and mode (spec.mode) on self.model, once its parameters have their shapes.

        The precision, MXNet's AMP (float32 parameters, cast at use: AMP's lists send Convolution
        and FullyConnected to the 16-bit type and keep RNN, softmax and the losses in float32):
        in mode hybrid under mixed-bfloat16, AMP's pass over the model's graph
        (amp.convert_symbol, the pass of amp.convert_hybrid_block, here on a SymbolBlock of the
        model's own Parameters: convert_hybrid_block's copies them, for inference), which leaves
        the process's operators as they are; otherwise amp.init, which wraps every operator of
        mxnet.ndarray and mxnet.symbol for the rest of the process (Gluon's layers look them up at
        each call), the only AMP of imperative Gluon and the one with AMP's loss scaler
        (init_trainer, mixed-float16: AMP's float16 runs on GPUs only, see the adapter's check).
        self.train_model is the block the step trains (self.model, or the converted graph's).

        "hybrid": the model is hybridized with static_alloc and static_shape: one static graph,
        its memory planned once, for the training step's fixed batch shape (on each context).
        Evaluation goes through self.eval_model, a second graph of the same Parameters
        hybridized with static_alloc only: its batches (and the last, smaller one) have other
        shapes, and the training graph re-plans when its input shapes or its recording
        (training) state change, so sharing one graph would re-plan it inside the timed
        segment after every evaluation. "imperative": no hybridize, Gluon's op-by-op
        execution, for training and evaluation."""
        import mxnet as mx
        from mxnet.contrib import amp

        if self.spec.mode not in ("hybrid", "imperative"):
            raise ValueError(f"MXNet has no mode {self.spec.mode!r}")
        dtype = AMP_DTYPES.get(self.applied_precision)
        converted = dtype == "bfloat16" and self.spec.mode == "hybrid"
        if dtype and not converted:
            amp.init(target_dtype=dtype)
        self.eval_model = self.train_model = self.model
        self.symbol = None  # the graph of mode hybrid
        if self.spec.mode == "hybrid":
            data = mx.sym.var("data")
            with warnings.catch_warnings():  # the input's type is unknown until a call gives one
                warnings.filterwarnings("ignore", "Cannot decide type", UserWarning)
                self.symbol = self.model(data)
                if converted:
                    self.symbol = amp.convert_symbol(self.symbol, dtype, data_names=["data"], cast_optional_params=False)
                self.eval_model = mx.gluon.SymbolBlock(self.symbol, data, params=self.model.collect_params())
                if converted:
                    self.train_model = mx.gluon.SymbolBlock(self.symbol, data, params=self.model.collect_params())
            self.eval_model.hybridize(static_alloc=True)
            self.train_model.hybridize(static_alloc=True, static_shape=True)

    def predict(self, inputs):
        """Outputs for a numpy batch (float32 images or int64 token ids), on the first context."""
        import mxnet as mx

        inputs = mx.nd.array(inputs, ctx=contexts(self.placement)[0], dtype=inputs.dtype)
        return self.eval_model(inputs).astype("float32", copy=False).asnumpy()  # amp.init's logits are 16-bit

    def precision_ops(self, inputs):
        """The compute operators of the model's forward pass as MXNet ran them (the graph's in
        mode hybrid, the blocks' in mode imperative), and whether the loss is scaled."""
        import mxnet as mx

        inputs = mx.nd.array(inputs, ctx=contexts(self.placement)[0], dtype=inputs.dtype)
        return forward_ops(self.model, inputs, self.symbol), self.loss_scaling

    def train_step(self, batch):
        inputs, labels = batch
        return train_step(self.train_model, self.loss_fn, self.trainer, self.placement, inputs, labels,
                          self.loss_scaling)

    def set_learning_rate(self, lr):
        self.trainer.set_learning_rate(lr)

    def parameter_count(self):
        return sum(int(np.prod(p.shape)) for p in self.model.collect_params().values() if p.grad_req != "null")
