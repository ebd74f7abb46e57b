"""Device and data-parallel code the MXNet scripts share (MNIST, ChestX-ray).

One device, or data parallel over N contexts of one process through a KVStore: every batch
of the shared epoch order is split evenly over the contexts (context i gets the i-th
contiguous slice, as dlbench.run.shard), each context runs forward and backward on its slice,
and the Trainer sums the N gradients in the KVStore ('device' on GPUs, 'local' on the CPU)
and applies one update, the same on every context.

mxnet is imported by `import_mxnet`, after the thread variables are set: its thread pools read
OMP_NUM_THREADS and MXNET_CPU_WORKER_NTHREADS once, at import, and the thread count comes
from the spec.
"""
import os
import time
from pathlib import Path

from dlbench.record import gpus, peak_rss_bytes
from dlbench.run import epoch_batches, resolve_device, threads_per_process

STRATEGIES = ("single", "kvstore")


def check_strategy(strategy, devices):
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown MXNet strategy {strategy!r}")
    if strategy == "single" and devices != 1:
        raise ValueError(f"strategy single runs on one device, not {devices}")


def import_mxnet(total_threads, contexts=1):
    """Set the thread variables, then import mxnet; returns (mxnet, the variables set).

    The engine runs each context's operators on a worker pool of its own, so N CPU contexts
    share the run's threads, as PyTorch's DDP processes do.
    """
    threads = {"OMP_NUM_THREADS": threads_per_process(total_threads, contexts), "MXNET_CPU_WORKER_NTHREADS": 1}
    os.environ.update({k: str(v) for k, v in threads.items()})
    import mxnet

    return mxnet, threads


def resolve_contexts(mx, requested, devices):
    """('gpu' or 'cpu', [N contexts]); N GPUs need N GPUs (else NotApplicable)."""
    device_kind = resolve_device(requested, mx.context.num_gpus(), devices)
    return device_kind, [mx.gpu(i) if device_kind == "gpu" else mx.cpu(i) for i in range(devices)]


def device_description(device_kind, devices):
    return {"kind": device_kind, "count": devices,
            "names": [g["name"] for g in gpus()[:devices]] if device_kind == "gpu" else []}


class SharedOrderBatches:
    """Gluon batch sampler: the global batches of the shared epoch order, as index lists.

    With `keyed`, each index comes as (epoch, index), so that a dataset in a DataLoader worker
    process (which holds a copy made when the pool started) knows the epoch of its samples.
    """

    def __init__(self, n_samples, global_batch, seed, keyed=False):
        self.n_samples, self.global_batch, self.seed, self.epoch = n_samples, global_batch, seed, 0
        self.keyed = keyed

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __iter__(self):
        for batch in epoch_batches(self.n_samples, self.global_batch, self.seed, self.epoch).tolist():
            yield [(self.epoch, i) for i in batch] if self.keyed else batch

    def __len__(self):
        return self.n_samples // self.global_batch


def make_trainer(mx, params, optimizer, device_kind, lr_scale=1):
    """Adam over the contexts' parameters; the learning rate is the spec's times lr_scale."""
    return mx.gluon.Trainer(params, "adam",
                            {"learning_rate": optimizer["lr"] * lr_scale, "beta1": optimizer["beta1"],
                             "beta2": optimizer["beta2"], "epsilon": optimizer["eps"]},
                            kvstore="device" if device_kind == "gpu" else "local")


def train_epoch(mx, batches, net, loss_fn, trainer, contexts, global_batch):
    """One timed epoch over (inputs, labels) global batches: (wall seconds, mean sample loss, samples).

    The clock starts before the first batch is asked for (a loader's workers start then) and
    stops when the engine, which is asynchronous, has done all the epoch's work.
    """
    from mxnet import autograd, gluon

    start = time.perf_counter()
    loss_sums = [mx.nd.zeros((1,), ctx=ctx) for ctx in contexts]  # read once, at the end
    n_batches = 0
    for inputs, labels in batches:
        inputs = gluon.utils.split_and_load(inputs, contexts)
        labels = gluon.utils.split_and_load(labels, contexts)
        with autograd.record():
            losses = [loss_fn(net(x), y) for x, y in zip(inputs, labels)]
        autograd.backward(losses)
        trainer.step(global_batch)  # the gradients are sums over the global batch
        for loss_sum, loss in zip(loss_sums, losses):
            loss_sum += loss.sum()
        n_batches += 1
    mx.nd.waitall()  # the engine is asynchronous: the epoch ends when its work is done
    wall_s = time.perf_counter() - start
    samples = n_batches * global_batch
    return wall_s, sum(s.asscalar() for s in loss_sums) / samples, samples


def peak_gpu_bytes(mx, device_kind):
    """GPU 0's memory in use, which is its peak (MXNet's pool keeps what it took); None on CPUs."""
    if device_kind != "gpu":
        return None
    free, total = mx.context.gpu_memory_info(0)
    return total - free


def _peak_rss_of(pid):
    """A live process's peak resident memory (VmHWM), 0 where it cannot be read."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def peak_rss_with_children():
    """Peak RSS of this process plus that of each live descendant (DataLoader workers): the sum
    of the peaks, an upper bound of what the run held at one time (forked workers share pages)."""
    import psutil

    children = psutil.Process().children(recursive=True)
    return peak_rss_bytes() + sum(_peak_rss_of(child.pid) for child in children)


def accuracy(net, dataset, ctx, batch_size=1000):
    """Share of a classification dataset (float labels) the network gets right."""
    from mxnet import gluon, nd

    correct = nd.zeros((1,), ctx=ctx)
    for inputs, labels in gluon.data.DataLoader(dataset, batch_size=batch_size):
        predicted = net(inputs.as_in_context(ctx)).argmax(axis=1)
        correct += (predicted == labels.as_in_context(ctx)).sum()
    return correct.asscalar() / len(dataset)
