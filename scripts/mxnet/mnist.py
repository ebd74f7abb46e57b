"""MNIST CNNs in MXNet Gluon: one device, or data parallel over N contexts through a KVStore."""
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dlbench.record import peak_rss_bytes  # noqa: E402
from dlbench.run import main  # noqa: E402
from parallel import (SharedOrderBatches, accuracy, check_strategy, device_description, import_mxnet,  # noqa: E402
                      make_trainer, peak_gpu_bytes, resolve_contexts, train_epoch)

# mxnet is imported inside the functions (parallel.import_mxnet): its thread pools read
# OMP_NUM_THREADS and MXNET_CPU_WORKER_NTHREADS once, at import, and the thread count comes
# from the spec.


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


def load_split(spec, split):
    from mxnet import gluon

    images = np.load(spec["data"][f"{split}_images"], mmap_mode="r")
    labels = np.load(spec["data"][f"{split}_labels"], mmap_mode="r")
    limit = spec[f"{split}_images"] or len(images)
    # Float labels, as SoftmaxCrossEntropyLoss and argmax's output are float in MXNet.
    return gluon.data.ArrayDataset(np.array(images[:limit]), labels[:limit].astype(np.float32))


def train(run):
    spec = run.spec
    n = spec["devices"]
    check_strategy(spec["strategy"], n)
    mx, threads = import_mxnet(spec["threads"], n)
    from mxnet import gluon

    device_kind, contexts = resolve_contexts(mx, spec["device"], n)
    mx.random.seed(spec["seed"])
    net = build_model(spec["model"])
    # Glorot uniform (Keras's default) rather than Gluon's Uniform(0.07), which is far too
    # wide for the 4608-input layers of the large model.
    net.initialize(mx.init.Xavier(), ctx=contexts)
    # static_alloc only: with static_shape, every change between the evaluation and the
    # training batch shape would re-plan the graph inside the timed epoch.
    net.hybridize(static_alloc=True)
    trainer = make_trainer(mx, net.collect_params(), spec["optimizer"], device_kind)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    train_set, test_set = load_split(spec, "train"), load_split(spec, "test")
    global_batch = spec["batch"] * n
    sampler = SharedOrderBatches(len(train_set), global_batch, spec["seed"])
    loader = gluon.data.DataLoader(train_set, batch_sampler=sampler, pin_memory=device_kind == "gpu")
    run.describe(
        framework_version=mx.__version__,
        device=device_description(device_kind, n),
        threads={**threads, "contexts": n},
    )
    for epoch in range(1, spec["epochs"] + 1):
        sampler.set_epoch(epoch)
        wall_s, loss, samples = train_epoch(mx, loader, net, loss_fn, trainer, contexts, global_batch)
        eval_start = time.perf_counter()
        test_accuracy = accuracy(net, test_set, contexts[0])
        run.epoch(epoch, wall_s, samples, loss,
                  metric={"test_accuracy": test_accuracy}, eval_s=time.perf_counter() - eval_start)
    run.finish(peak_rss=peak_rss_bytes(), peak_gpu_bytes=peak_gpu_bytes(mx, device_kind))


def count_parameters(model_name):
    return sum(int(np.prod(p.shape)) for p in build_model(model_name).collect_params().values()
               if p.grad_req != "null")


if __name__ == "__main__":
    main(train, count_parameters)
