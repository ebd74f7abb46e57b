"""DenseNet (chestxray.blocks; DenseNet-121 in the studies) on ChestX-ray14
in PyTorch: one device, DistributedDataParallel, DataParallel.

The model is torchvision's DenseNet-BC, with its module names (so torchvision's ImageNet
checkpoints load: `load_imagenet_weights`). Input "real": a Dataset keyed by (epoch, index)
that decodes with PIL (the pillow-simd the environment has) and applies the shared random
crop, flip and normalisation, in a DataLoader whose persistent workers start in
build_training; on a GPU it pins its batches and each is copied to the device one batch ahead
(adapter.on_device). Input "synthetic": the task's random tensors in host memory, each batch
gathered by index in this process, no loader; on a GPU into reused pinned buffers, copied one
batch ahead on a side stream (adapter.gathered). Input "resident": the same tensors, labels and
the run's order put on the device once, outside the clock, each batch gathered there
(adapter.resident).
"""
import re
from collections import OrderedDict
from contextlib import contextmanager, nullcontext

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint
from torch.utils.data import DataLoader, Dataset, Sampler

from dlbench.workloads.chestxray.images import eval_transform, read_image, sample_rng, train_transform
from dlbench.contract import Steps
from dlbench.frameworks import pytorch as adapter
from dlbench.frameworks.pytorch.step import WorkloadMethods
from dlbench.workloads.chestxray.task import ChestXray

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
        self.checkpointed = False  # mode checkpoint (set by build_training)

    def bottleneck(self, *features):
        return self.conv1(self.relu1(self.norm1(torch.cat(features, 1))))

    def forward(self, features):
        if self.checkpointed and self.training and torch.is_grad_enabled():
            # As torchvision's memory_efficient DenseNet: the concatenation, norm1 and relu1 outputs
            # are not kept for the backward pass but recomputed from the features it keeps anyway.
            bottleneck = checkpoint(self.bottleneck, *features, use_reentrant=False,
                                    context_fn=lambda: (nullcontext(), self.batch_statistics_only()))
        else:
            bottleneck = self.bottleneck(*features)
        return self.conv2(self.relu2(self.norm2(bottleneck)))

    @contextmanager
    def batch_statistics_only(self):
        """The recomputation normalises with the batch's statistics, as the forward pass did, but
        does not update norm1's running statistics a second time (torchvision's does): momentum 0
        leaves them as they are, and the batch count is put back. (Not track_running_stats=False:
        the op would save other tensors than the forward pass did, which checkpoint refuses.)"""
        norm = self.norm1
        momentum, count = norm.momentum, norm.num_batches_tracked.clone()
        norm.momentum = 0.0
        try:
            yield
        finally:
            norm.momentum = momentum
            norm.num_batches_tracked.copy_(count)


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
    """model: the spec's DenseNetModel (DenseNet-121: 6,968,206 parameters with 14 outputs)."""
    return DenseNet(model.classes, model.blocks, model.growth, model.bottleneck, model.compression,
                    model.init_features)


# torchvision's ImageNet checkpoints name some keys the old way: 'denselayer1.norm.1.weight'.
LEGACY_KEY = re.compile(r"^(.*denselayer\d+\.(?:norm|relu|conv))\.((?:[12])\.(?:weight|bias|running_mean|running_var))$")


def load_imagenet_weights(model, path):
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

    def __init__(self, paths, crop):
        self.paths, self.crop = paths, crop

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, index):
        return torch.from_numpy(eval_transform(read_image(self.paths[index], "pillow"), self.crop))


class RunKeys(Sampler):
    """The training loader's batch sampler: the (epoch, index) keys of each index batch of the
    run's order (each step's epoch beside it); empty until set_order."""

    def __init__(self):
        self.order, self.epochs = np.empty((0, 0), dtype=np.int64), np.empty(0, dtype=np.int64)

    def set_order(self, order, epochs):
        self.order, self.epochs = order, epochs

    def __iter__(self):
        for indices, epoch in zip(self.order, self.epochs):
            yield [(int(epoch), int(index)) for index in indices]

    def __len__(self):
        return len(self.order)


def train_loader(paths, labels, spec, pin_memory):
    """The real-input training DataLoader and its batch sampler (RunKeys). Its spec.workers
    workers start here, once, and are kept for the whole run."""
    sampler = RunKeys()
    loader = DataLoader(TrainImages(paths, labels, spec.seed, spec.data.crop), batch_sampler=sampler,
                        num_workers=spec.workers, pin_memory=pin_memory, persistent_workers=spec.workers > 0)
    if spec.workers > 0:
        iter(loader)  # starts the persistent workers now; the sampler is empty, so nothing loads
    return loader, sampler


class PyTorchChestXray(WorkloadMethods, ChestXray, Steps):
    def build_model(self):
        torch.manual_seed(self.spec.seed)  # the same initial weights on every rank
        self.device = adapter.device(self.placement)
        self.model = build_model(self.spec.model)
        if self.spec.weights:
            load_imagenet_weights(self.model, self.spec.weights)
        self.model.to(self.device)

    def build_training(self):
        gpu = self.placement.device_kind == "gpu"
        for module in self.model.modules():
            if isinstance(module, DenseLayer):
                module.checkpointed = self.spec.mode == adapter.CHECKPOINT
        self.net = adapter.wrap(self.model, self.placement)
        opt = self.spec.optimizer
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=self.learning_rate,
                                          betas=(opt.beta1, opt.beta2), eps=opt.eps)
        self.loss_fn = nn.BCEWithLogitsLoss()
        if self.spec.input in ("synthetic", "resident"):
            self.images = torch.from_numpy(self.synthetic_images)
            self.labels = torch.from_numpy(self.synthetic_labels)
        else:
            self.loader, self.sampler = train_loader(self.train_paths, self.train_labels, self.spec, gpu)

    def batches(self, order, epochs):
        if self.spec.input == "real":
            self.sampler.set_order(order, epochs)
            return adapter.on_device(self.loader, self.placement)
        # the images by index % pool, the labels by index (no loader)
        place = adapter.resident if self.spec.input == "resident" else adapter.gathered
        return place((self.images, self.labels), (order % len(self.images), order), self.placement)

    def train_step(self, batch):
        images, labels = batch
        self.optimizer.zero_grad(set_to_none=True)
        with self.autocast():
            loss = self.loss_fn(self.net(images), labels)
        self.backward_step(loss, self.optimizer)
        return loss.detach()

    def eval_inputs(self, paths):
        loader = DataLoader(EvalImages(paths, self.spec.data.crop), batch_size=self.spec.batch,
                            num_workers=self.spec.workers)
        for images in loader:
            yield images.numpy()


WORKLOAD = PyTorchChestXray
