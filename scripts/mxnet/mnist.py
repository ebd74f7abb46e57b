"""MNIST CNNs in MXNet Gluon: one device, or data parallel over N contexts through a KVStore."""
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchlib.record import gpus, peak_rss_bytes  # noqa: E402
from benchlib.run import epoch_batches, main, resolve_device, threads_per_process  # noqa: E402

# mxnet is imported inside the functions: its thread pools read OMP_NUM_THREADS and
# MXNET_CPU_WORKER_NTHREADS once, at import, and the thread count comes from the spec.


def build_model(name):
    """The models every framework builds; 402,442 and 4,104,202 parameters."""
    from mxnet.gluon import nn

    net = nn.HybridSequential()
    if name == "small":
        net.add(
            nn.Conv2D(32, 3, padding=1, in_channels=1, activation="relu"), nn.MaxPool2D(2), nn.Flatten(),
            nn.Dense(64, in_units=32 * 14 * 14, activation="relu"), nn.Dense(10, in_units=64),
        )
    elif name == "large":
        net.add(
            nn.Conv2D(128, 3, padding=1, in_channels=1, activation="relu"), nn.MaxPool2D(2),
            nn.Conv2D(256, 3, padding=1, in_channels=128, activation="relu"), nn.MaxPool2D(2),
            nn.Conv2D(512, 3, padding=1, in_channels=256, activation="relu"), nn.MaxPool2D(2), nn.Flatten(),
            nn.Dense(512, in_units=512 * 3 * 3, activation="relu"), nn.Dense(512, in_units=512, activation="relu"),
            nn.Dense(10, in_units=512),
        )
    else:
        raise ValueError(f"unknown model {name!r}")
    return net


class SharedOrderBatches:
    """Gluon batch sampler: the global batches of the shared epoch order, as index lists."""

    def __init__(self, n_samples, global_batch, seed):
        self.n_samples, self.global_batch, self.seed, self.epoch = n_samples, global_batch, seed, 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __iter__(self):
        yield from epoch_batches(self.n_samples, self.global_batch, self.seed, self.epoch).tolist()

    def __len__(self):
        return self.n_samples // self.global_batch


def load_split(spec, split):
    from mxnet import gluon

    images = np.load(spec["data"][f"{split}_images"], mmap_mode="r")
    labels = np.load(spec["data"][f"{split}_labels"], mmap_mode="r")
    limit = spec[f"{split}_images"] or len(images)
    # Float labels, as SoftmaxCrossEntropyLoss and argmax's output are float in MXNet.
    return gluon.data.ArrayDataset(np.array(images[:limit]), labels[:limit].astype(np.float32))


def accuracy(net, dataset, ctx, batch_size=1000):
    from mxnet import gluon, nd

    correct = nd.zeros((1,), ctx=ctx)
    for images, labels in gluon.data.DataLoader(dataset, batch_size=batch_size):
        predicted = net(images.as_in_context(ctx)).argmax(axis=1)
        correct += (predicted == labels.as_in_context(ctx)).sum()
    return correct.asscalar() / len(dataset)


def train(run):
    spec = run.spec
    strategy, n = spec["strategy"], spec["devices"]
    if strategy not in ("single", "kvstore"):
        raise ValueError(f"unknown MXNet strategy {strategy!r}")
    if strategy == "single" and n != 1:
        raise ValueError(f"strategy single runs on one device, not {n}")
    # The engine runs each context's operators on a worker pool of its own, so N CPU contexts
    # share the run's threads, as PyTorch's DDP processes do.
    threads = {"OMP_NUM_THREADS": threads_per_process(spec["threads"], n), "MXNET_CPU_WORKER_NTHREADS": 1}
    os.environ.update({k: str(v) for k, v in threads.items()})
    import mxnet as mx
    from mxnet import autograd, gluon

    device_kind = resolve_device(spec["device"], mx.context.num_gpus(), n)
    contexts = [mx.gpu(i) if device_kind == "gpu" else mx.cpu(i) for i in range(n)]
    mx.random.seed(spec["seed"])
    net = build_model(spec["model"])
    # Glorot uniform (Keras's default) rather than Gluon's Uniform(0.07), which is far too
    # wide for the 4608-input layers of the large model.
    net.initialize(mx.init.Xavier(), ctx=contexts)
    net.hybridize(static_alloc=True, static_shape=True)
    opt = spec["optimizer"]
    trainer = gluon.Trainer(net.collect_params(), "adam",
                            {"learning_rate": opt["lr"], "beta1": opt["beta1"], "beta2": opt["beta2"],
                             "epsilon": opt["eps"]},
                            kvstore="device" if device_kind == "gpu" else "local")
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    train_set, test_set = load_split(spec, "train"), load_split(spec, "test")
    global_batch = spec["batch"] * n
    sampler = SharedOrderBatches(len(train_set), global_batch, spec["seed"])
    loader = gluon.data.DataLoader(train_set, batch_sampler=sampler, pin_memory=device_kind == "gpu")
    run.describe(
        framework_version=mx.__version__,
        device={"kind": device_kind, "count": n,
                "names": [g["name"] for g in gpus()[:n]] if device_kind == "gpu" else []},
        threads={**threads, "contexts": n},
    )
    for epoch in range(1, spec["epochs"] + 1):
        sampler.set_epoch(epoch)
        start = time.perf_counter()
        loss_sums = [mx.nd.zeros((1,), ctx=ctx) for ctx in contexts]  # read once, at the end
        for images, labels in loader:
            images = gluon.utils.split_and_load(images, contexts)
            labels = gluon.utils.split_and_load(labels, contexts)
            with autograd.record():
                losses = [loss_fn(net(x), y) for x, y in zip(images, labels)]
            autograd.backward(losses)
            trainer.step(global_batch)  # the gradients are sums over the global batch
            for loss_sum, loss in zip(loss_sums, losses):
                loss_sum += loss.sum()
        mx.nd.waitall()  # the engine is asynchronous: the epoch ends when its work is done
        wall_s = time.perf_counter() - start
        loss = sum(s.asscalar() for s in loss_sums) / (len(sampler) * global_batch)
        eval_start = time.perf_counter()
        test_accuracy = accuracy(net, test_set, contexts[0])
        run.epoch(epoch, wall_s, len(sampler) * global_batch, loss,
                  metric={"test_accuracy": test_accuracy}, eval_s=time.perf_counter() - eval_start)
    gpu_bytes = None
    if device_kind == "gpu":
        free, total = mx.context.gpu_memory_info(0)  # MXNet's pool keeps what it took: used is the peak
        gpu_bytes = total - free
    run.finish(peak_rss=peak_rss_bytes(), peak_gpu_bytes=gpu_bytes)


def count_parameters(model_name):
    return sum(int(np.prod(p.shape)) for p in build_model(model_name).collect_params().values()
               if p.grad_req != "null")


if __name__ == "__main__":
    main(train, count_parameters)
