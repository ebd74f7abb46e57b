"""IMDB sentiment LSTM in MXNet Gluon: time per epoch by batch size and data-loader workers."""
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dlbench.record import gpus, peak_rss_bytes  # noqa: E402
from dlbench.run import NotApplicable, epoch_batches, main, resolve_device  # noqa: E402
from parallel import accuracy  # noqa: E402

# mxnet is imported inside the functions: its thread pools read OMP_NUM_THREADS and
# MXNET_CPU_WORKER_NTHREADS once, at import, and the thread count comes from the spec.


def build_model(vocabulary, embedding, hidden, classes):
    """Embedding -> fused one-layer LSTM -> last step -> Dense logits; 772,354 parameters at
    5000,128,128 (Gluon's LSTM has two bias vectors, as PyTorch's)."""
    from mxnet import gluon
    from mxnet.gluon import nn, rnn

    class SentimentLSTM(gluon.HybridBlock):
        def __init__(self):
            super().__init__()
            with self.name_scope():
                self.embedding = nn.Embedding(vocabulary, embedding)
                self.lstm = rnn.LSTM(hidden, layout="NTC", input_size=embedding)
                self.output = nn.Dense(classes, in_units=hidden)

        def hybrid_forward(self, F, tokens):
            steps = self.lstm(self.embedding(tokens))  # (batch, time, hidden)
            # The reviews are padded in front, so the last step has read the whole review.
            return self.output(F.squeeze(F.slice_axis(steps, axis=1, begin=-1, end=None), axis=1))

    return SentimentLSTM()


class SharedOrderBatches:
    """Gluon batch sampler: the batches of the shared epoch order, as index lists."""

    def __init__(self, n_samples, batch, seed):
        self.n_samples, self.batch, self.seed, self.epoch = n_samples, batch, seed, 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __iter__(self):
        yield from epoch_batches(self.n_samples, self.batch, self.seed, self.epoch).tolist()

    def __len__(self):
        return self.n_samples // self.batch


def load_split(spec, split):
    from mxnet import gluon

    sequences = np.load(spec["data"][f"{split}_sequences"], mmap_mode="r")
    labels = np.load(spec["data"][f"{split}_labels"], mmap_mode="r")
    limit = spec[f"{split}_reviews"] or len(sequences)
    # Float labels, as SoftmaxCrossEntropyLoss and argmax's output are float in MXNet.
    return gluon.data.ArrayDataset(np.array(sequences[:limit]), labels[:limit].astype(np.float32))


def train(run):
    spec = run.spec
    if spec["grad"] == "sparse":
        raise NotApplicable("sparse embedding gradients are a PyTorch sweep dimension")
    if spec["grad"] != "dense":
        raise ValueError(f"grad must be dense or sparse, got {spec['grad']!r}")
    threads = {"OMP_NUM_THREADS": spec["threads"], "MXNET_CPU_WORKER_NTHREADS": 1}
    os.environ.update({k: str(v) for k, v in threads.items()})
    import mxnet as mx
    from mxnet import autograd, gluon

    device_kind = resolve_device(spec["device"], mx.context.num_gpus(), 1)
    ctx = mx.gpu(0) if device_kind == "gpu" else mx.cpu(0)
    mx.random.seed(spec["seed"])
    m = spec["model"]
    net = build_model(m["vocabulary"], m["embedding"], m["hidden"], m["classes"])
    net.initialize(mx.init.Xavier(), ctx=ctx)  # the LSTM and Dense biases stay zero
    # static_alloc only: with static_shape, every change between the evaluation and the
    # training batch shape would re-plan the graph inside the timed epoch.
    net.hybridize(static_alloc=True)

    train_set, test_set = load_split(spec, "train"), load_split(spec, "test")
    batch = spec["batch"]
    sampler = SharedOrderBatches(len(train_set), batch, spec["seed"])
    loader = gluon.data.DataLoader(train_set, batch_sampler=sampler, num_workers=spec["workers"],
                                   pin_memory=device_kind == "gpu")
    opt = spec["optimizer"]
    # FactorScheduler counts updates: the rate falls at the first update of every
    # lr_step_epochs-th epoch after the first, as a StepLR stepped per epoch.
    schedule = mx.lr_scheduler.FactorScheduler(step=opt["lr_step_epochs"] * len(sampler),
                                               factor=opt["lr_factor"], base_lr=opt["lr"])
    trainer = gluon.Trainer(net.collect_params(), "adam",
                            {"learning_rate": opt["lr"], "beta1": opt["beta1"], "beta2": opt["beta2"],
                             "epsilon": opt["eps"], "lr_scheduler": schedule},
                            kvstore="device" if device_kind == "gpu" else "local")
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    run.describe(
        framework_version=mx.__version__,
        device={"kind": device_kind, "count": 1,
                "names": [g["name"] for g in gpus()[:1]] if device_kind == "gpu" else []},
        threads={**threads, "loader_workers": spec["workers"]},
    )
    for epoch in range(1, spec["epochs"] + 1):
        sampler.set_epoch(epoch)
        start = time.perf_counter()
        loss_sum = mx.nd.zeros((1,), ctx=ctx)  # read once, at the end
        for tokens, labels in loader:
            tokens, labels = tokens.as_in_context(ctx), labels.as_in_context(ctx)
            with autograd.record():
                loss = loss_fn(net(tokens), labels)
            loss.backward()
            trainer.step(batch)  # the gradients are sums over the batch
            loss_sum += loss.mean()
        mx.nd.waitall()  # the engine is asynchronous: the epoch ends when its work is done
        wall_s = time.perf_counter() - start
        lr = trainer.learning_rate  # the scheduler's rate at this epoch's last update
        eval_start = time.perf_counter()
        test_accuracy = accuracy(net, test_set, ctx, batch_size=500)
        run.epoch(epoch, wall_s, len(sampler) * batch, loss_sum.asscalar() / len(sampler),
                  metric={"test_accuracy": test_accuracy}, eval_s=time.perf_counter() - eval_start, lr=lr)
    gpu_bytes = None
    if device_kind == "gpu":
        free, total = mx.context.gpu_memory_info(0)  # MXNet's pool keeps what it took: used is the peak
        gpu_bytes = total - free
    run.finish(peak_rss=peak_rss_bytes(), peak_gpu_bytes=gpu_bytes)


def count_parameters(name):
    vocabulary, embedding, hidden = (int(v) for v in name.split(","))
    net = build_model(vocabulary, embedding, hidden, classes=2)
    return sum(int(np.prod(p.shape)) for p in net.collect_params().values() if p.grad_req != "null")


if __name__ == "__main__":
    main(train, count_parameters)
