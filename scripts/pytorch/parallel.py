"""Devices and data parallelism in PyTorch, shared by the MNIST and ChestX-ray scripts.

Strategies: "single" (one device), "ddp" (DistributedDataParallel, one process per device,
gloo on CPUs, nccl on GPUs) and "dp" (DataParallel, one process driving every GPU). Every
strategy reads the same global batches in the same order (dlbench.run.epoch_batches); a
device takes its contiguous slice of each (dlbench.run.shard).

A script checks its spec with `check_strategy`, then `launch`es its worker, which calls
`setup_process`, `wrap_model`, `describe`, `start_epoch` / `end_epoch` / `after_evaluation`
around each epoch, and `finish` at the end.
"""
import socket
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.utils.data import DataLoader, Sampler

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dlbench.record import peak_rss_bytes  # noqa: E402
from dlbench.run import NotApplicable, epoch_batches, resolve_device, shard, threads_per_process  # noqa: E402

STRATEGIES = ("single", "ddp", "dp")


class SharedOrderSampler(Sampler):
    """Yields this rank's index slice of each global batch of the shared epoch order."""

    def __init__(self, n_samples, global_batch, seed, rank=0, world_size=1):
        self.n_samples, self.global_batch, self.seed = n_samples, global_batch, seed
        self.rank, self.world_size, self.epoch = rank, world_size, 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def shards(self):
        """This rank's indices of each batch of the epoch, as numpy arrays."""
        for batch in epoch_batches(self.n_samples, self.global_batch, self.seed, self.epoch):
            yield shard(batch, self.rank, self.world_size)

    def __iter__(self):
        for indices in self.shards():
            yield torch.from_numpy(indices)

    def __len__(self):
        return self.n_samples // self.global_batch


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_strategy(spec):
    """The device kind ('gpu' or 'cpu') of a spec's run, after checking its strategy and
    device count; NotApplicable where the point has no meaning on this machine."""
    device_kind = resolve_device(spec["device"], torch.cuda.device_count(), spec["devices"])
    strategy = spec["strategy"]
    if strategy == "dp" and device_kind != "gpu":
        raise NotApplicable("DataParallel runs on GPUs only; this run has none")
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown PyTorch strategy {strategy!r}")
    if strategy == "single" and spec["devices"] != 1:
        raise ValueError("the single strategy runs on one device")
    return device_kind


def launch(worker, spec, run, device_kind, *args):
    """worker(rank, spec, run, device_kind, port, *args): in this process (single, dp), or in
    one spawned process per device (ddp). Tensors in args reach spawned processes through
    shared memory (torch.multiprocessing), not as copies."""
    if spec["strategy"] == "ddp" and spec["devices"] > 1:
        mp.spawn(worker, args=(spec, run, device_kind, free_port(), *args), nprocs=spec["devices"])
    else:
        worker(0, spec, run, device_kind, None, *args)


def setup_process(rank, spec, device_kind, port, timeout=None):
    """Threads, device and, for ddp, the process group of one process: (device, world_size).
    timeout: of the process group's collectives (a datetime.timedelta; None, torch's default)."""
    world_size = spec["devices"] if spec["strategy"] == "ddp" else 1
    torch.set_num_threads(threads_per_process(spec["threads"], world_size))
    if device_kind == "gpu":
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if world_size > 1:
        dist.init_process_group("nccl" if device_kind == "gpu" else "gloo",
                                init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                                **({"timeout": timeout} if timeout is not None else {}))
    return device, world_size


def wrap_model(model, spec, device_kind, rank):
    """The model (already on its device) wrapped for the spec's strategy."""
    if spec["strategy"] == "ddp":
        return nn.parallel.DistributedDataParallel(model, device_ids=[rank] if device_kind == "gpu" else None)
    if spec["strategy"] == "dp":
        return nn.DataParallel(model, device_ids=list(range(spec["devices"])))
    return model


def unwrap(model):
    """The model inside a DDP or DataParallel wrapper (evaluation runs on one device)."""
    return model.module if isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)) else model


def describe(run, spec, device_kind, world_size, threads=None, **extra):
    """run.describe with the framework, the devices and the threads (plus `threads`' entries)."""
    run.describe(
        framework_version=torch.__version__,
        device={"kind": device_kind, "count": spec["devices"],
                "names": [torch.cuda.get_device_name(i) for i in range(spec["devices"])] if device_kind == "gpu" else []},
        threads={"torch_num_threads": torch.get_num_threads(), "processes": world_size, **(threads or {})},
        cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version() if device_kind == "gpu" else None,
        **extra,
    )


def start_epoch(world_size):
    """Every rank starts the clock together."""
    if world_size > 1:
        dist.barrier()


def end_epoch(loss_sum, device, world_size):
    """Wait for the device and, for ddp, every rank (the mean of their loss sums)."""
    synchronize(device)
    if world_size > 1:
        dist.all_reduce(loss_sum)  # also waits for every rank to finish the epoch
        loss_sum /= world_size
    return loss_sum


def after_evaluation(world_size):
    """The other ranks wait for rank 0's evaluation, outside the timed epoch."""
    if world_size > 1:
        dist.barrier()


def finish(run, rank, device, device_kind, world_size, peak_rss=None, **extra):
    """Peak RSS summed over the ranks (peak_rss: this rank's, by default its own process's),
    rank 0's GPU peak, the process group torn down; rank 0 writes run.finish(..., **extra)."""
    own = peak_rss_bytes() if peak_rss is None else peak_rss
    peak = torch.tensor([float(own)], dtype=torch.float64, device=device)
    if world_size > 1:
        dist.all_reduce(peak)  # the memory of all ranks together
        dist.barrier()  # no rank tears down while another still talks to it
        dist.destroy_process_group()
    if rank == 0:
        gpu_bytes = torch.cuda.max_memory_allocated(device) if device_kind == "gpu" else None
        run.finish(peak_rss=int(peak.item()), peak_gpu_bytes=gpu_bytes, **extra)


@torch.no_grad()
def accuracy(model, dataset, device, batch_size=1000):
    """Share of a classification dataset the model gets right (in eval mode, no gradients)."""
    model.eval()
    correct = 0
    for inputs, labels in DataLoader(dataset, batch_size=batch_size):
        predicted = model(inputs.to(device)).argmax(dim=1)
        correct += (predicted.cpu() == labels).sum().item()
    model.train()
    return correct / len(dataset)
