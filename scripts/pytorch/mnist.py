"""MNIST CNNs in PyTorch: one device, DistributedDataParallel (gloo/nccl), DataParallel."""
import os
import socket
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.utils.data import DataLoader, Sampler, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchlib.record import peak_rss_bytes  # noqa: E402
from benchlib.run import NotApplicable, epoch_batches, main, resolve_device, shard, threads_per_process  # noqa: E402


def build_model(name):
    """The models every framework builds; 402,442 and 4,104,202 parameters."""
    if name == "small":
        return nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
            nn.Linear(32 * 14 * 14, 64), nn.ReLU(), nn.Linear(64, 10),
        )
    if name == "large":
        return nn.Sequential(
            nn.Conv2d(1, 128, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(128, 256, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(256, 512, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
            nn.Linear(512 * 3 * 3, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10),
        )
    raise ValueError(f"unknown model {name!r}")


class SharedOrderSampler(Sampler):
    """Yields this rank's index slice of each global batch of the shared epoch order."""

    def __init__(self, n_samples, global_batch, seed, rank=0, world_size=1):
        self.n_samples, self.global_batch, self.seed = n_samples, global_batch, seed
        self.rank, self.world_size, self.epoch = rank, world_size, 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __iter__(self):
        for batch in epoch_batches(self.n_samples, self.global_batch, self.seed, self.epoch):
            yield torch.from_numpy(shard(batch, self.rank, self.world_size))

    def __len__(self):
        return self.n_samples // self.global_batch


def load_split(spec, split):
    images = np.load(spec["data"][f"{split}_images"], mmap_mode="r")
    labels = np.load(spec["data"][f"{split}_labels"], mmap_mode="r")
    limit = spec[f"{split}_images"] or len(images)
    return TensorDataset(torch.from_numpy(np.array(images[:limit])),
                         torch.from_numpy(labels[:limit].astype(np.int64)))


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.no_grad()
def accuracy(model, dataset, device, batch_size=1000):
    model.eval()
    correct = 0
    for images, labels in DataLoader(dataset, batch_size=batch_size):
        predicted = model(images.to(device)).argmax(dim=1)
        correct += (predicted.cpu() == labels).sum().item()
    model.train()
    return correct / len(dataset)


def train_worker(rank, spec, run, device_kind, port):
    """One process: the whole run on one device, or one rank of DistributedDataParallel."""
    world_size = spec["devices"] if spec["strategy"] == "ddp" else 1
    torch.set_num_threads(threads_per_process(spec["threads"], world_size))
    if device_kind == "gpu":
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if world_size > 1:
        dist.init_process_group("nccl" if device_kind == "gpu" else "gloo",
                                init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    torch.manual_seed(spec["seed"])  # the same initial weights on every rank
    model = build_model(spec["model"]).to(device)
    if spec["strategy"] == "ddp":
        model = nn.parallel.DistributedDataParallel(model, device_ids=[rank] if device_kind == "gpu" else None)
    elif spec["strategy"] == "dp":
        model = nn.DataParallel(model, device_ids=list(range(spec["devices"])))
    opt = spec["optimizer"]
    optimizer = torch.optim.Adam(model.parameters(), lr=opt["lr"], betas=(opt["beta1"], opt["beta2"]), eps=opt["eps"])
    loss_fn = nn.CrossEntropyLoss()

    train = load_split(spec, "train")
    test = load_split(spec, "test") if rank == 0 else None
    global_batch = spec["batch"] * spec["devices"]
    sampler = SharedOrderSampler(len(train), global_batch, spec["seed"], rank, world_size)
    loader = DataLoader(train, sampler=sampler, batch_size=None, pin_memory=device_kind == "gpu")
    if rank == 0:
        run.describe(
            framework_version=torch.__version__,
            device={"kind": device_kind, "count": spec["devices"],
                    "names": [torch.cuda.get_device_name(i) for i in range(spec["devices"])] if device_kind == "gpu" else []},
            threads={"torch_num_threads": torch.get_num_threads(), "processes": world_size},
            cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version() if device_kind == "gpu" else None,
        )
    for epoch in range(1, spec["epochs"] + 1):
        sampler.set_epoch(epoch)
        if world_size > 1:
            dist.barrier()
        start = time.perf_counter()
        loss_sum = torch.zeros((), device=device)
        for images, labels in loader:
            images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(images), labels)
            loss.backward()
            optimizer.step()
            loss_sum += loss.detach()
        synchronize(device)
        if world_size > 1:
            dist.all_reduce(loss_sum)  # also waits for every rank to finish the epoch
            loss_sum /= world_size
        wall_s = time.perf_counter() - start
        if rank == 0:
            eval_start = time.perf_counter()
            test_accuracy = accuracy(model.module if world_size > 1 or spec["strategy"] == "dp" else model, test, device)
            run.epoch(epoch, wall_s, len(sampler) * global_batch, loss_sum.item() / len(sampler),
                      metric={"test_accuracy": test_accuracy}, eval_s=time.perf_counter() - eval_start)
        if world_size > 1:
            dist.barrier()  # the others wait for rank 0's evaluation, outside the timed epoch
    peak = torch.tensor([float(peak_rss_bytes())], dtype=torch.float64, device=device)
    if world_size > 1:
        dist.all_reduce(peak)  # the memory of all ranks together
        dist.barrier()  # no rank tears down while another still talks to it
        dist.destroy_process_group()
    if rank == 0:
        gpu_bytes = torch.cuda.max_memory_allocated(device) if device_kind == "gpu" else None
        run.finish(peak_rss=int(peak.item()), peak_gpu_bytes=gpu_bytes)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train(run):
    spec = run.spec
    device_kind = resolve_device(spec["device"], torch.cuda.device_count(), spec["devices"])
    strategy = spec["strategy"]
    if strategy == "dp" and device_kind != "gpu":
        raise NotApplicable("DataParallel runs on GPUs only; this run has none")
    if strategy not in ("single", "ddp", "dp"):
        raise ValueError(f"unknown PyTorch strategy {strategy!r}")
    if strategy == "single" and spec["devices"] != 1:
        raise ValueError("the single strategy runs on one device")
    if strategy == "ddp" and spec["devices"] > 1:
        mp.spawn(train_worker, args=(spec, run, device_kind, free_port()), nprocs=spec["devices"])
    else:
        train_worker(0, spec, run, device_kind, None)


def count_parameters(model_name):
    return sum(p.numel() for p in build_model(model_name).parameters() if p.requires_grad)


if __name__ == "__main__":
    main(train, count_parameters)
