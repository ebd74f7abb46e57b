"""MNIST CNNs in PyTorch: one device, DistributedDataParallel (gloo/nccl), DataParallel."""
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from dlbench.run import main  # noqa: E402
from parallel import (SharedOrderSampler, accuracy, after_evaluation, check_strategy, describe, end_epoch, finish,  # noqa: E402
                      launch, setup_process, start_epoch, unwrap, wrap_model)


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


def load_split(spec, split):
    images = np.load(spec["data"][f"{split}_images"], mmap_mode="r")
    labels = np.load(spec["data"][f"{split}_labels"], mmap_mode="r")
    limit = spec[f"{split}_images"] or len(images)
    return TensorDataset(torch.from_numpy(np.array(images[:limit])),
                         torch.from_numpy(labels[:limit].astype(np.int64)))


def train_worker(rank, spec, run, device_kind, port):
    """One process: the whole run on one device, or one rank of DistributedDataParallel."""
    device, world_size = setup_process(rank, spec, device_kind, port)
    torch.manual_seed(spec["seed"])  # the same initial weights on every rank
    model = wrap_model(build_model(spec["model"]).to(device), spec, device_kind, rank)
    opt = spec["optimizer"]
    optimizer = torch.optim.Adam(model.parameters(), lr=opt["lr"], betas=(opt["beta1"], opt["beta2"]), eps=opt["eps"])
    loss_fn = nn.CrossEntropyLoss()

    train = load_split(spec, "train")
    test = load_split(spec, "test") if rank == 0 else None
    global_batch = spec["batch"] * spec["devices"]
    sampler = SharedOrderSampler(len(train), global_batch, spec["seed"], rank, world_size)
    loader = DataLoader(train, sampler=sampler, batch_size=None, pin_memory=device_kind == "gpu")
    if rank == 0:
        describe(run, spec, device_kind, world_size)
    for epoch in range(1, spec["epochs"] + 1):
        sampler.set_epoch(epoch)
        start_epoch(world_size)
        start = time.perf_counter()
        loss_sum = torch.zeros((), device=device)
        for images, labels in loader:
            images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(images), labels)
            loss.backward()
            optimizer.step()
            loss_sum += loss.detach()
        end_epoch(loss_sum, device, world_size)
        wall_s = time.perf_counter() - start
        if rank == 0:
            eval_start = time.perf_counter()
            test_accuracy = accuracy(unwrap(model), test, device)
            run.epoch(epoch, wall_s, len(sampler) * global_batch, loss_sum.item() / len(sampler),
                      metric={"test_accuracy": test_accuracy}, eval_s=time.perf_counter() - eval_start)
        after_evaluation(world_size)
    finish(run, rank, device, device_kind, world_size)


def train(run):
    spec = run.spec
    launch(train_worker, spec, run, check_strategy(spec))


def count_parameters(model_name):
    return sum(p.numel() for p in build_model(model_name).parameters() if p.requires_grad)


if __name__ == "__main__":
    main(train, count_parameters)
