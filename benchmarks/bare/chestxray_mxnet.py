"""ChestX-ray DenseNet-121 in plain MXNet Gluon, as a tutorial writes the loop: the model
zoo's DenseNet-121, the benchmark's batch, threads, optimizer and float32 policy, EPOCHS epochs on one
context (the first GPU unless the spec's device is cpu), random NDArrays shaped as the
synthetic input (a pool of at most SYNTHETIC_POOL images reused by index, labels of the
training split's size), in the spec's input kind, as the harness feeds it:

- synthetic: the pool in host memory; each step's batch gathered by index on the host and
  copied to the context (the engine is asynchronous: the copy is queued with the steps).
- device: the pool, the labels and the run's index order (one NDArray per step) put on the
  context once, before the clock; each step gathers there: no host-to-device copy in a
  timed step.

The run's order (a permutation per epoch) is drawn before the first epoch. Each epoch's clock
stops when the engine's work is done (waitall); one JSON line per epoch.

Leaves out what the harness adds: its child process and memory sampling, the shared sample
order and synthetic values (MXNet's and numpy's RNG here), data parallelism over contexts,
its calibrated units and evaluations, the loss read.

    python benchmarks/bare/chestxray_mxnet.py SPEC_FILE EPOCHS
"""
import numpy as np

from dlbench import bare
from dlbench.workloads.chestxray.labels import PATHOLOGIES
from dlbench.workloads.chestxray.mxnet import build_model
from dlbench.workloads.chestxray.synthetic import synthetic_sizes


def main():
    spec, epochs, ctx = bare.start("mxnet")  # before MXNet's import, which reads the thread settings
    import mxnet as mx
    from mxnet import autograd, gluon

    n_train, pool = synthetic_sizes(spec)
    crop = spec.data.crop
    images = mx.nd.random.normal(shape=(pool, 3, crop, crop))
    labels = mx.nd.random.randint(0, 2, shape=(n_train, len(PATHOLOGIES))).astype("float32")
    n_batches = n_train // spec.batch  # the last partial batch is dropped, as in the harness
    order = np.concatenate([np.random.permutation(n_train)[:n_batches * spec.batch] for _ in range(epochs)])
    order = order.reshape(epochs * n_batches, spec.batch)
    if spec.input == "resident":
        images, labels = images.as_in_context(ctx), labels.as_in_context(ctx)
        steps = [mx.nd.array(index, ctx=ctx, dtype="int64") for index in order]
        batches = ((mx.nd.take(images, index % pool), mx.nd.take(labels, index)) for index in steps)
        mx.nd.waitall()
    else:
        batches = ((mx.nd.take(images, mx.nd.array(index % pool, dtype="int64")).as_in_context(ctx),
                    mx.nd.take(labels, mx.nd.array(index, dtype="int64")).as_in_context(ctx)) for index in order)

    net = build_model(spec.model)
    net.initialize(ctx=ctx)
    net.hybridize(static_alloc=True, static_shape=True)  # the harness's default mode, hybrid
    opt = spec.optimizer
    trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": opt.lr, "beta1": opt.beta1,
                                                           "beta2": opt.beta2, "epsilon": opt.eps})
    loss_fn = gluon.loss.SigmoidBinaryCrossEntropyLoss()
    clock = bare.EpochClock(n_batches * spec.batch, device_kind="cpu" if ctx.device_type == "cpu" else "gpu",
                            input=spec.input)

    for epoch in range(1, epochs + 1):
        clock.start()
        for _ in range(n_batches):
            x, y = next(batches)
            with autograd.record():
                loss = loss_fn(net(x), y)
            loss.backward()
            trainer.step(spec.batch)
        mx.nd.waitall()  # the engine is asynchronous: the epoch ends when its work is done
        clock.stop(epoch)


if __name__ == "__main__":
    main()
