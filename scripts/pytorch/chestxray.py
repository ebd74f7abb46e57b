"""DenseNet-121 on ChestX-ray14 in PyTorch (14 findings, sigmoid + binary cross-entropy), and the
PyTorch loader benchmark (workload chestxray-loader).

Training: Adam at the base learning rate times the device count (as the study did), on one
device or data parallel with the engines and code MNIST uses (parallel.py: ddp, dp). Data
"real" reads the preprocessed 264x264 JPEGs through a torch Dataset (decoded by PIL, the
pillow-simd the environment has; random crop 224 + horizontal flip + ImageNet normalisation,
dlbench.chestxray's transform) and a DataLoader with spec["workers"] worker processes,
which start afresh every epoch (inside the timed epoch, as in the study). Data "synthetic"
is one fixed set of random float32 tensors (at most SYNTHETIC_POOL images, reused by index)
and random 0/1 labels of the training split's size, made in memory before training and read
in the same batch order without a loader.

After each epoch, outside the timed epoch, rank 0 computes the validation loss and macro AUC
on the real validation images (centre crop) in both data modes, so eval_s is comparable; at
the end it computes the test AUC (macro and per finding), also on the real test images.
"""
import datetime
import os
import re
import sys
import time
from collections import OrderedDict
from pathlib import Path

import numpy as np
import PIL
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, default_collate

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from dlbench.chestxray import (CROP_SIZE, FINDINGS, SYNTHETIC_POOL, eval_transform,  # noqa: E402
                                read_image, read_labels_csv, sample_rng, split_files, train_transform)
from dlbench.metrics import auc_per_finding, macro_auc  # noqa: E402
from dlbench.record import peak_rss_bytes  # noqa: E402
from dlbench.run import main, resolve_device  # noqa: E402
from parallel import (SharedOrderSampler, after_evaluation, check_strategy, describe, end_epoch, finish,  # noqa: E402
                      launch, setup_process, start_epoch, synchronize, unwrap, wrap_model)

DENSENET121 = {"classes": 14, "blocks": [6, 12, 24, 16], "growth": 32, "bottleneck": 4,
               "compression": 0.5, "init_features": 64}


# --- the model: DenseNet-BC as torchvision's densenet.py builds it, with its module names -------

class DenseLayer(nn.Module):
    """BN-ReLU-conv1x1 (bottleneck x growth channels), BN-ReLU-conv3x3 (growth channels)."""

    def __init__(self, in_features, growth, bottleneck):
        super().__init__()
        self.norm1 = nn.BatchNorm2d(in_features)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(in_features, bottleneck * growth, kernel_size=1, stride=1, bias=False)
        self.norm2 = nn.BatchNorm2d(bottleneck * growth)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(bottleneck * growth, growth, kernel_size=3, stride=1, padding=1, bias=False)

    def forward(self, features):
        bottleneck = self.conv1(self.relu1(self.norm1(torch.cat(features, 1))))
        return self.conv2(self.relu2(self.norm2(bottleneck)))


class DenseBlock(nn.ModuleDict):
    def __init__(self, layers, in_features, growth, bottleneck):
        super().__init__()
        for i in range(layers):
            self.add_module(f"denselayer{i + 1}", DenseLayer(in_features + i * growth, growth, bottleneck))

    def forward(self, x):
        features = [x]
        for layer in self.values():
            features.append(layer(features))
        return torch.cat(features, 1)


class Transition(nn.Sequential):
    """BN-ReLU-conv1x1 (compression) and 2x2 average pooling."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.add_module("norm", nn.BatchNorm2d(in_features))
        self.add_module("relu", nn.ReLU(inplace=True))
        self.add_module("conv", nn.Conv2d(in_features, out_features, kernel_size=1, stride=1, bias=False))
        self.add_module("pool", nn.AvgPool2d(kernel_size=2, stride=2))


class DenseNet(nn.Module):
    """features (conv 7x7/2, BN, ReLU, max pool 3x3/2, dense blocks and transitions, final BN),
    ReLU, global average pooling, a linear classifier of `classes` logits. Initialised as
    torchvision initialises it: Kaiming-normal convolutions, BN weight 1 and bias 0, linear
    bias 0 (the linear weight keeps PyTorch's default)."""

    def __init__(self, classes, blocks, growth, bottleneck, compression, init_features):
        super().__init__()
        self.features = nn.Sequential(OrderedDict([
            ("conv0", nn.Conv2d(3, init_features, kernel_size=7, stride=2, padding=3, bias=False)),
            ("norm0", nn.BatchNorm2d(init_features)),
            ("relu0", nn.ReLU(inplace=True)),
            ("pool0", nn.MaxPool2d(kernel_size=3, stride=2, padding=1)),
        ]))
        features = init_features
        for i, layers in enumerate(blocks):
            self.features.add_module(f"denseblock{i + 1}", DenseBlock(layers, features, growth, bottleneck))
            features += layers * growth
            if i != len(blocks) - 1:
                out_features = int(features * compression)
                self.features.add_module(f"transition{i + 1}", Transition(features, out_features))
                features = out_features
        self.features.add_module("norm5", nn.BatchNorm2d(features))
        self.classifier = nn.Linear(features, classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)
            elif isinstance(m, nn.Linear):
                nn.init.constant_(m.bias, 0)

    def forward(self, x):
        out = F.relu(self.features(x), inplace=True)
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(out, 1), 1))


def build_model(model):
    return DenseNet(model["classes"], model["blocks"], model["growth"], model["bottleneck"],
                    model["compression"], model["init_features"])


# torchvision's ImageNet checkpoints name some keys the old way: 'denselayer1.norm.1.weight'.
LEGACY_KEY = re.compile(r"^(.*denselayer\d+\.(?:norm|relu|conv))\.((?:[12])\.(?:weight|bias|running_mean|running_var))$")


def load_weights(model, path):
    """ImageNet weights from a torchvision-format state dict (a .pth file): everything but the
    classifier, which keeps its initialisation (14 outputs, not 1000)."""
    state = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    fixed = {}
    for key, value in state.items():
        key = key.removeprefix("module.")
        legacy = LEGACY_KEY.match(key)
        fixed[legacy.group(1) + legacy.group(2) if legacy else key] = value
    fixed = {k: v for k, v in fixed.items() if not k.startswith("classifier.")}
    missing, unexpected = model.load_state_dict(fixed, strict=False)
    missing = [k for k in missing if not k.startswith("classifier.") and not k.endswith("num_batches_tracked")]
    if missing or unexpected:
        raise ValueError(f"{path}: not DenseNet weights of this shape: missing {missing[:5]}, "
                         f"unexpected {unexpected[:5]} ({len(missing)} and {len(unexpected)} in all)")


def count_parameters(name):
    if name != "densenet121":
        raise ValueError(f"unknown model {name!r}, expected densenet121")
    return sum(p.numel() for p in build_model(DENSENET121).parameters() if p.requires_grad)


# --- data --------------------------------------------------------------------------------------

class TrainImages(Dataset):
    """Key (epoch, index): decode with PIL, random crop and flip (drawn from the seed, the epoch
    and the index: the same whichever worker or device loads it), normalise."""

    def __init__(self, paths, labels, seed, crop):
        self.paths, self.labels, self.seed, self.crop = paths, labels, seed, crop

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, key):
        epoch, index = key
        image = train_transform(read_image(self.paths[index], "pillow"), sample_rng(self.seed, epoch, index), self.crop)
        return torch.from_numpy(image), torch.from_numpy(self.labels[index])


class EvalImages(Dataset):
    """Decode with PIL, centre crop, normalise."""

    def __init__(self, paths, labels, crop):
        self.paths, self.labels, self.crop = paths, labels, crop

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, index):
        image = eval_transform(read_image(self.paths[index], "pillow"), self.crop)
        return torch.from_numpy(image), torch.from_numpy(self.labels[index])


class EpochBatchSampler(SharedOrderSampler):
    """This rank's slice of each global batch of the shared order, as (epoch, index) keys."""

    def __iter__(self):
        for indices in self.shards():
            yield [(self.epoch, int(i)) for i in indices]


_worker_start_rss = 0  # a loader worker's resident memory when it started


def current_rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def note_worker_start(worker_id):
    """worker_init_fn: a forked worker starts out resident in pages it shares with the process
    that forked it; those are that process's memory, not the worker's."""
    global _worker_start_rss
    _worker_start_rss = current_rss_bytes()


def collate_with_rss(samples):
    """A batch, and (pid, the memory the process that made it has added since it started,
    with the batch in hand): what a loader worker adds to the run.

    The current RSS (statm), not the peak (ru_maxrss): a forked process can inherit its
    parent's high-water mark, which would count the parent's memory again.
    """
    images, labels = default_collate(samples)
    return images, labels, (os.getpid(), current_rss_bytes() - _worker_start_rss)


class MemoryReports:
    """Peak RSS of this process plus what its loader workers added (each worker's largest RSS at
    a batch, less the pages it shared with this process when forked). Each pass over a loader
    (an epoch, an evaluation) starts its own workers, so the workers' part is the largest sum
    over one pass's workers (processes that ran at one time), not the sum over every pass."""

    def __init__(self):
        self.passes = []

    def new_pass(self):
        self.passes.append({})

    def add(self, report):
        pid, rss = report
        if pid != os.getpid():  # this process's peak is counted once, at the end
            workers = self.passes[-1]
            workers[pid] = max(rss, workers.get(pid, 0))

    def total(self):
        return peak_rss_bytes() + max((sum(workers.values()) for workers in self.passes), default=0)


def train_loader(spec, paths, labels, sampler, pin):
    # Workers start afresh every epoch, so their start-up is part of the timed epoch, as in the study.
    return DataLoader(TrainImages(paths, labels, spec["seed"], spec["crop"]), batch_sampler=sampler,
                      num_workers=spec["workers"], collate_fn=collate_with_rss, worker_init_fn=note_worker_start,
                      pin_memory=pin, persistent_workers=False)


def eval_loader(spec, split, pin):
    paths, labels = split_files(spec["labels"], spec["images"], split)
    return DataLoader(EvalImages(paths, labels, spec["crop"]), batch_size=spec["batch"], shuffle=False,
                      num_workers=spec["workers"], collate_fn=collate_with_rss, worker_init_fn=note_worker_start,
                      pin_memory=pin)


def synthetic_set(n_samples, seed, crop, shared):
    """Random N(0, 1) float32 images [min(N, SYNTHETIC_POOL), 3, crop, crop] and random 0/1
    labels [N, 14], made once; in shared memory where ddp processes read them (one copy)."""
    generator = torch.Generator().manual_seed(seed)
    images = torch.empty((min(n_samples, SYNTHETIC_POOL), 3, crop, crop), dtype=torch.float32)
    labels = torch.empty((n_samples, len(FINDINGS)), dtype=torch.float32)
    if shared:
        images.share_memory_()
        labels.share_memory_()
    images.normal_(generator=generator)
    labels.copy_(torch.randint(0, 2, labels.shape, generator=generator))
    return images, labels


def synthetic_batches(images, labels, sampler, pin):
    """This rank's batches of the shared order, gathered from the in-memory set (no loader)."""
    for indices in sampler.shards():
        index = torch.from_numpy(indices)
        batch_images, batch_labels = images.index_select(0, index % len(images)), labels.index_select(0, index)
        if pin:
            batch_images, batch_labels = batch_images.pin_memory(), batch_labels.pin_memory()
        yield batch_images, batch_labels, None


@torch.no_grad()
def evaluate(model, loader, device, memory):
    """(mean binary cross-entropy, {finding: AUC or None}, macro AUC or None) over a split."""
    model.eval()
    memory.new_pass()
    loss_sum, scores, targets = torch.zeros((), device=device), [], []
    for images, labels, report in loader:
        memory.add(report)
        logits = model(images.to(device, non_blocking=True))
        loss_sum += F.binary_cross_entropy_with_logits(logits, labels.to(device, non_blocking=True), reduction="sum")
        scores.append(torch.sigmoid(logits))  # on the device: no wait for it batch by batch
        targets.append(labels)
    model.train()
    scores, targets = torch.cat(scores).cpu().numpy(), torch.cat(targets).numpy()
    per_finding = auc_per_finding(targets.astype(np.uint8), scores, FINDINGS)
    return loss_sum.item() / targets.size, per_finding, macro_auc(per_finding)


# --- training ----------------------------------------------------------------------------------

def train_worker(rank, spec, run, device_kind, port, synthetic):
    """One process: the whole run on one device (single, dp), or one rank of ddp."""
    device, world_size = setup_process(rank, spec, device_kind, port,
                                       timeout=datetime.timedelta(seconds=spec["timeout_s"]))
    if device_kind == "gpu":
        torch.backends.cudnn.benchmark = True  # fixed input size, as the study's PyTorch notebook
    torch.manual_seed(spec["seed"])  # the same initial weights on every rank
    model = build_model(spec["model"])
    if spec.get("weights"):
        load_weights(model, spec["weights"])
    model = wrap_model(model.to(device), spec, device_kind, rank)
    opt = spec["optimizer"]
    optimizer = torch.optim.Adam(model.parameters(), lr=opt["lr"] * spec["devices"],
                                 betas=(opt["beta1"], opt["beta2"]), eps=opt["eps"])
    loss_fn = nn.BCEWithLogitsLoss()

    pin = device_kind == "gpu"
    global_batch = spec["batch"] * spec["devices"]
    memory = MemoryReports()
    if synthetic is None:
        paths, labels = split_files(spec["labels"], spec["images"], "train")
        sampler = EpochBatchSampler(len(paths), global_batch, spec["seed"], rank, world_size)
        loader = train_loader(spec, paths, labels, sampler, pin)
    else:
        sampler = SharedOrderSampler(len(synthetic[1]), global_batch, spec["seed"], rank, world_size)
    if rank == 0:
        valid, test = eval_loader(spec, "valid", pin), eval_loader(spec, "test", pin)
        describe(run, spec, device_kind, world_size, threads={"loader_workers": spec["workers"]},
                 data=spec["data"], image_library=f"PIL {PIL.__version__}",
                 train_images=len(sampler) * global_batch,
                 validation="real validation images (centre crop) in both data modes")
    for epoch in range(1, spec["epochs"] + 1):
        sampler.set_epoch(epoch)
        start_epoch(world_size)
        start = time.perf_counter()
        loss_sum = torch.zeros((), device=device)
        memory.new_pass()
        batches = loader if synthetic is None else synthetic_batches(*synthetic, sampler, pin)
        for images, targets, report in batches:
            if report is not None:
                memory.add(report)
            images, targets = images.to(device, non_blocking=True), targets.to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(images), targets)
            loss.backward()
            optimizer.step()
            loss_sum += loss.detach()
        end_epoch(loss_sum, device, world_size)
        wall_s = time.perf_counter() - start
        if rank == 0:
            eval_start = time.perf_counter()
            valid_loss, _, valid_auc = evaluate(unwrap(model), valid, device, memory)
            metric = {"valid_loss": valid_loss, **({"valid_auc": valid_auc} if valid_auc is not None else {})}
            run.epoch(epoch, wall_s, len(sampler) * global_batch, loss_sum.item() / len(sampler),
                      metric=metric, eval_s=time.perf_counter() - eval_start)
        after_evaluation(world_size)
    extra = {}
    if rank == 0:
        eval_start = time.perf_counter()
        test_loss, per_finding, macro = evaluate(unwrap(model), test, device, memory)
        extra = {"test_auc": {"macro": macro, "per_finding": per_finding}, "test_loss": test_loss,
                 "test_eval_s": time.perf_counter() - eval_start}
    finish(run, rank, device, device_kind, world_size, peak_rss=memory.total(), **extra)


def train(run):
    spec = run.spec
    if spec["workload"] == "chestxray-loader":
        return loader_benchmark(run)
    if spec["data"] not in ("real", "synthetic"):
        raise ValueError(f"data must be real or synthetic, got {spec['data']!r}")
    if spec["optimizer"]["name"] != "adam":
        raise ValueError(f"the study trains with Adam, got {spec['optimizer']['name']!r}")
    device_kind = check_strategy(spec)
    synthetic = None
    if spec["data"] == "synthetic":
        n_train = len(read_labels_csv(spec["labels"])["train"][0])
        synthetic = synthetic_set(n_train, spec["seed"], spec["crop"],
                                  shared=spec["strategy"] == "ddp" and spec["devices"] > 1)
    launch(train_worker, spec, run, device_kind, synthetic)


# --- the loader benchmark ----------------------------------------------------------------------

def loader_benchmark(run):
    """The real-data training loader alone (decode, crop, flip, normalise, batches moved to the
    device), no model: one device, spec["workers"] workers, spec["epochs"] epochs."""
    spec = {**run.spec, "devices": 1, "strategy": "single"}
    device_kind = resolve_device(spec["device"], torch.cuda.device_count(), 1)
    device, _ = setup_process(0, spec, device_kind, None)
    pin = device_kind == "gpu"
    paths, labels = split_files(spec["labels"], spec["images"], "train")
    sampler = EpochBatchSampler(len(paths), spec["batch"], spec["seed"])
    loader = train_loader({**spec, "crop": spec.get("crop", CROP_SIZE)}, paths, labels, sampler, pin)
    memory = MemoryReports()
    describe(run, spec, device_kind, 1, threads={"loader_workers": spec["workers"]},
             image_library=f"PIL {PIL.__version__}", train_images=len(sampler) * spec["batch"])
    for epoch in range(1, spec["epochs"] + 1):
        sampler.set_epoch(epoch)
        memory.new_pass()
        start = time.perf_counter()
        samples = 0
        for images, targets, report in loader:
            memory.add(report)
            images, targets = images.to(device, non_blocking=True), targets.to(device, non_blocking=True)
            samples += len(images)
        synchronize(device)
        run.epoch(epoch, time.perf_counter() - start, samples, None, metric={}, eval_s=None)
    gpu_bytes = torch.cuda.max_memory_allocated(device) if device_kind == "gpu" else None
    run.finish(peak_rss=memory.total(), peak_gpu_bytes=gpu_bytes)


if __name__ == "__main__":
    main(train, count_parameters)
