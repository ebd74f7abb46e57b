"""MNIST in plain MXNet Gluon, as a tutorial writes the loop: the benchmark's model, batch,
threads and optimizer, EPOCHS epochs on one context, the training arrays in memory as
NDArrays.

Leaves out what the harness adds: its child process and memory sampling, the shared sample
order (numpy's permutation here), data parallelism over contexts, its calibrated units and
evaluations, the loss read.

    python src/dlbench/workloads/mnist/scripts/bare_mxnet.py SPEC_FILE EPOCHS
"""
import json
import os
import sys
import time

import numpy as np

from dlbench.frameworks.mxnet import gpu_float32
from dlbench.specs import spec_from_dict
from dlbench.workloads.mnist.mxnet import build_model


def main():
    with open(sys.argv[1]) as f:
        spec = spec_from_dict(json.load(f))
    epochs = int(sys.argv[2])
    # MXNet reads its thread settings once, at import.
    os.environ.update({"OMP_NUM_THREADS": str(spec.threads), "MXNET_CPU_WORKER_NTHREADS": "1"})
    gpu_float32(spec.gpu_float32)  # the run's float32 policy on GPUs, set as the harness's backend sets it (NVIDIA's libraries read it as they load)
    import mxnet as mx
    from mxnet import autograd, gluon

    ctx = mx.gpu(0) if spec.device != "cpu" and mx.context.num_gpus() > 0 else mx.cpu(0)
    mx.random.seed(spec.seed)
    np.random.seed(spec.seed)

    limit = spec.data.train_limit
    images = mx.nd.array(np.load(spec.data.train_images, mmap_mode="r")[:limit], dtype="float32")
    labels = mx.nd.array(np.load(spec.data.train_labels, mmap_mode="r")[:limit], dtype="float32")

    net = build_model(spec.model.name)
    net.initialize(mx.init.Xavier(), ctx=ctx)
    net.hybridize(static_alloc=True, static_shape=True)  # the harness's default mode, hybrid
    opt = spec.optimizer
    trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": opt.lr, "beta1": opt.beta1,
                                                           "beta2": opt.beta2, "epsilon": opt.eps})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    n_batches = images.shape[0] // spec.batch  # the last partial batch is dropped, as in the harness

    for epoch in range(1, epochs + 1):
        start = time.perf_counter()
        order = mx.nd.array(np.random.permutation(images.shape[0]), dtype="int64")
        for i in range(n_batches):
            index = order[i * spec.batch:(i + 1) * spec.batch]
            x = mx.nd.take(images, index).as_in_context(ctx)
            y = mx.nd.take(labels, index).as_in_context(ctx)
            with autograd.record():
                loss = loss_fn(net(x), y)
            loss.backward()
            trainer.step(spec.batch)
        mx.nd.waitall()  # the engine is asynchronous: the epoch ends when its work is done
        wall_s = time.perf_counter() - start
        print(json.dumps({"epoch": epoch, "wall_s": wall_s, "samples": n_batches * spec.batch}), flush=True)


if __name__ == "__main__":
    main()
