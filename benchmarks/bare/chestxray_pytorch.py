"""ChestX-ray DenseNet-121 in plain PyTorch, as a tutorial writes the loop: the benchmark's
model, batch, threads, optimizer, float32 policy and epochs on one device (CUDA when the spec's
device is not cpu and a GPU is there), random tensors shaped as the synthetic input (a pool of
at most SYNTHETIC_POOL images reused by index, labels of the training split's size), in the
spec's input kind, as the harness feeds it:

- synthetic: the pool in host memory; each step's batch gathered by index on the host. On a
  GPU the copy is hidden as careful users hide it (Apex's data_prefetcher): gathered into one
  of two reused pinned buffers and copied on a side CUDA stream one step ahead, while the
  step before runs.
- device: the pool, the labels and the run's index order put on the device once, before the
  clock; each step gathers on the device: no host-to-device copy in a timed step.

The run's order (a permutation per epoch) is drawn before the first epoch, and one stream of
batches runs through every epoch, as the harness's one iterable over the run's order. Each
epoch's clock stops after the device is synchronised; one JSON line per epoch.

Leaves out what the harness adds: its child process and memory sampling, the shared sample
order and synthetic values (torch's RNG here), data parallelism, validation after every
epoch and the final test evaluation, the loss read.

    python benchmarks/bare/chestxray_pytorch.py SPEC_FILE EPOCHS
"""
import torch
from torch import nn

from dlbench import bare
from dlbench.workloads.chestxray.labels import PATHOLOGIES
from dlbench.workloads.chestxray.pytorch import build_model
from dlbench.workloads.chestxray.synthetic import synthetic_sizes


def host_batches(images, labels, order, device):
    """synthetic: the batches of `order` ([steps, batch] indices) gathered on the host; on a GPU
    in pinned memory, each copied on a side stream while the step before runs."""
    if device.type == "cpu":
        for index in order:
            yield images.index_select(0, index % len(images)), labels.index_select(0, index)
        return
    batch = order.shape[1]
    pinned = [(torch.empty((batch, *images.shape[1:]), pin_memory=True),
               torch.empty((batch, labels.shape[1]), pin_memory=True)) for _ in range(2)]
    copied = [torch.cuda.Event(), torch.cuda.Event()]  # when each pinned buffer may be gathered into again
    side = torch.cuda.Stream(device)

    def prefetch(step):
        x, y = pinned[step % 2]
        copied[step % 2].synchronize()  # its copy of two steps ago has finished
        torch.index_select(images, 0, order[step] % len(images), out=x)
        torch.index_select(labels, 0, order[step], out=y)
        with torch.cuda.stream(side):
            batch_on_device = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            copied[step % 2].record(side)
        return batch_on_device

    upcoming = prefetch(0)
    for step in range(len(order)):
        torch.cuda.current_stream(device).wait_stream(side)
        x, y = upcoming
        # made on the side stream, used on this one: not freed for reuse before this stream is done with them
        x.record_stream(torch.cuda.current_stream(device))
        y.record_stream(torch.cuda.current_stream(device))
        if step + 1 < len(order):
            upcoming = prefetch(step + 1)
        yield x, y


def device_batches(images, labels, order, device):
    """device: the pool, labels and order on the device once (before the clock); each step gathers there."""
    images, labels, order = images.to(device), labels.to(device), order.to(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)

    def batches():
        for index in order:
            yield images.index_select(0, index % len(images)), labels.index_select(0, index)
    return batches()


def main():
    spec, epochs, device = bare.start("pytorch")
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True

    n_train, pool = synthetic_sizes(spec)
    crop = spec.data.crop
    images = torch.randn(pool, 3, crop, crop)
    labels = torch.randint(0, 2, (n_train, len(PATHOLOGIES))).float()
    n_batches = n_train // spec.batch  # the last partial batch is dropped, as in the harness
    order = torch.cat([torch.randperm(n_train)[:n_batches * spec.batch] for _ in range(epochs)])
    order = order.view(epochs * n_batches, spec.batch)
    feed = device_batches if spec.input == "resident" else host_batches
    batches = feed(images, labels, order, device)

    model = build_model(spec.model).to(device)
    opt = spec.optimizer
    optimizer = torch.optim.Adam(model.parameters(), lr=opt.lr, betas=(opt.beta1, opt.beta2), eps=opt.eps)
    loss_fn = nn.BCEWithLogitsLoss()
    clock = bare.EpochClock(n_batches * spec.batch, device_kind="cpu" if device.type == "cpu" else "gpu", input=spec.input)

    model.train()
    for epoch in range(1, epochs + 1):
        clock.start()
        for _ in range(n_batches):
            x, y = next(batches)
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        clock.stop(epoch)


if __name__ == "__main__":
    main()
