"""DenseNet (config chestxray.blocks; DenseNet-121's architecture) on ChestX-ray14 in MXNet Gluon:
the model zoo's DenseNet (14 logits, sigmoid
+ binary cross-entropy), Adam, on one context or data parallel over N contexts of one process
(the Trainer sums the gradients in a KVStore) or of one process a node (a dist_sync kvstore).

Input "real": a Gluon Dataset that decodes the preprocessed images with mx.image.imread
(MXNet's OpenCV) and crops, flips, scales and normalises them with MXNet operators, the crop
and flip drawn from the shared seed for (epoch, index); a Gluon DataLoader with `workers`
worker processes, started once and iterated once over the run's order (pinned on a GPU).
Input "synthetic": the task's random tensors as host NDArrays, each batch gathered with nd.take;
on a GPU with one context, each batch's gather and its copy (as_in_context) are pushed to
MXNet's asynchronous engine one batch ahead, so that the copy runs while the step before
computes (with several contexts split_and_load copies each its slice in the step). Input
"resident": the same tensors and the run's order put on the first context once, outside the
clock, each batch gathered there with nd.take (with several contexts split_and_load sends the
others their slices from there, device to device). Evaluation reads the
real images (centre crop) in both modes through a DataLoader of its own, with its own worker
pool: it runs between convergence segments, while the training loader's iteration is open.

mxnet is imported inside the functions: its thread pools read the thread variables that the
adapter's setup sets, once, at import.
"""
from pathlib import Path

import numpy as np

from dlbench.workloads.chestxray.images import IMAGENET_MEAN, IMAGENET_STD, sample_rng
from dlbench.contract import Steps, one_ahead
from dlbench.errors import DataError
from dlbench.frameworks import mxnet as adapter
from dlbench.frameworks.mxnet.loaders import data_loader
from dlbench.frameworks.mxnet.step import WorkloadMethods, make_trainer
from dlbench.workloads.chestxray.definition import DENSENET121, has_densenet121_architecture
from dlbench.workloads.chestxray.task import ChestXray

MEAN, STD = tuple(float(v) for v in IMAGENET_MEAN), tuple(float(v) for v in IMAGENET_STD)


def build_model(model):
    """The Gluon model zoo's DenseNet (model.blocks; growth 32, bottleneck 4, compression 0.5, 64
    initial features; BN-ReLU-conv: vision.densenet121 for 6-12-24-16) with a
    model.classes-output Dense head: for DenseNet-121, 6,968,206 trainable parameters with 14
    outputs. Nothing is downloaded (pretrained=False).
    Its batch normalisation is Gluon's default, PyTorch's (momentum 0.9 here, the old running
    value's weight, is PyTorch's 0.1; epsilon 1e-5), as in every framework: checked."""
    from mxnet.gluon import nn
    from mxnet.gluon.model_zoo import vision

    from dlbench.frameworks.mxnet import internals

    if not has_densenet121_architecture(model):
        raise ValueError(f"the Gluon model zoo's DenseNet has DenseNet-121's architecture ({DENSENET121}, "
                         f"any blocks); the spec asks for {model}")
    net = vision.DenseNet(model.init_features, model.growth, list(model.blocks), bn_size=model.bottleneck,
                          classes=model.classes)
    blocks = [net]
    while blocks:
        block = blocks.pop()
        blocks.extend(internals.children(block))
        if isinstance(block, nn.BatchNorm) and internals.batch_norm_settings(block) != (0.9, 1e-5):
            momentum, eps = internals.batch_norm_settings(block)
            raise ValueError(f"{block.name}: batch normalisation with momentum {momentum} and "
                             f"epsilon {eps}, not PyTorch's 0.9 (0.1) and 1e-5")
    return net


# --- data ------------------------------------------------------------------------------------

def decode(path, crop):
    """A preprocessed image as H x W x 1 uint8 (mx.image.imread, grey)."""
    import mxnet as mx

    try:
        image = mx.image.imread(path, flag=0)
    except mx.base.MXNetError as err:
        reason = str(err).strip().splitlines()[-1]  # MXNet's message ends with the check that failed
        raise DataError(f"{path}: unreadable image ({reason})") from err
    height, width = image.shape[:2]
    if height < crop or width < crop:
        raise DataError(f"{path}: {height} x {width} is smaller than the {crop} x {crop} crop")
    return image


def to_input(patch):
    """crop x crop x 1 uint8 -> float32 3 x crop x crop in [0, 1], grey replicated, ImageNet-normalised."""
    from mxnet import nd

    tensor = nd.image.to_tensor(patch)
    return nd.image.normalize(nd.repeat(tensor, repeats=3, axis=0), mean=MEAN, std=STD)


def training_images(paths, labels, seed, crop):
    """A Gluon Dataset of (float32 3 x crop x crop image, float32 [14] labels), keyed by
    (epoch, index): a random crop (top, then left) and a horizontal flip with p=0.5, drawn
    from dlbench.workloads.chestxray.images.sample_rng(seed, epoch, index) as in every framework."""
    import mxnet as mx
    from mxnet import gluon, nd

    class TrainingImages(gluon.data.Dataset):
        def __len__(self):
            return len(paths)

        def __getitem__(self, key):
            epoch, index = key
            image = decode(paths[index], crop)
            height, width = image.shape[:2]
            rng = sample_rng(seed, epoch, index)
            top, left = int(rng.integers(0, height - crop + 1)), int(rng.integers(0, width - crop + 1))
            patch = mx.image.fixed_crop(image, left, top, crop, crop)
            if rng.random() < 0.5:
                patch = nd.flip(patch, axis=1)
            return to_input(patch), labels[index]

    return TrainingImages()


def evaluation_images(crop):
    """A Gluon Dataset keyed by path: the centre-cropped image (float32 3 x crop x crop)."""
    import mxnet as mx
    from mxnet import gluon

    class EvaluationImages(gluon.data.Dataset):
        def __getitem__(self, path):
            image = decode(path, crop)
            height, width = image.shape[:2]
            return to_input(mx.image.fixed_crop(image, (width - crop) // 2, (height - crop) // 2, crop, crop))

    return EvaluationImages()


class RunBatches:
    """Gluon batch sampler of the run's order, each index as (its step's epoch, index): the
    dataset in a worker process (a copy made when the pool started) learns the epoch from its
    keys. Lazy: the loader takes a batch when it sends one to load (its prefetch), no further."""

    def __init__(self):
        self.order, self.epochs = np.empty((0, 0), dtype=np.int64), np.empty(0, dtype=np.int64)

    def set_order(self, order, epochs):
        self.order, self.epochs = order, epochs

    def __iter__(self):
        for batch, epoch in zip(self.order, self.epochs.tolist()):
            yield [(epoch, index) for index in batch.tolist()]

    def __len__(self):
        return len(self.order)


class PathBatches:
    """Gluon batch sampler of the images to evaluate, in order, `batch` paths at a time (the
    last batch may be smaller)."""

    def __init__(self, batch):
        self.batch, self.paths = batch, []

    def __iter__(self):
        for start in range(0, len(self.paths), self.batch):
            yield self.paths[start:start + self.batch]

    def __len__(self):
        return (len(self.paths) + self.batch - 1) // self.batch


def loader(workload, dataset, sampler):
    """A DataLoader with spec.workers worker processes (started now, closed at teardown)."""
    spec = workload.spec
    return data_loader(workload.placement, dataset, batch_sampler=sampler, num_workers=spec.workers,
                               pin_memory=workload.placement.device_kind == "gpu",
                               timeout=max(120, int(spec.timeout_s)))


def training_loader(workload):
    """(sampler, DataLoader) over a workload's real training images (its train_paths and
    train_labels); set the sampler's order and epochs before iterating the loader."""
    sampler = RunBatches()
    dataset = training_images(workload.train_paths, workload.train_labels, workload.spec.seed,
                              workload.spec.data.crop)
    return sampler, loader(workload, dataset, sampler)


def load_imagenet_weights(mx, net, path):
    """All of a DenseNet-121 parameter file but its classifier: a Gluon save_parameters file
    (the model zoo's format, names like features.0.weight) or an exported one (arg:/aux:
    names like densenet0_conv0_weight). Returns the number of arrays loaded."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such weights file")
    from dlbench.frameworks.mxnet import internals

    loaded = mx.nd.load(str(path))
    by_structure = internals.parameters_by_structure(net)  # features.0.weight -> Parameter
    if all(key.startswith(("arg:", "aux:")) for key in loaded):
        prefix = net.prefix  # densenetN_
        by_name = {p.name[len(prefix):]: p for p in by_structure.values()}
        loaded = {key.split(":", 1)[1].split("_", 1)[1]: value for key, value in loaded.items()}
        targets = {name: p for name, p in by_name.items() if not p.name.startswith(net.output.prefix)}
    else:
        targets = {name: p for name, p in by_structure.items() if not name.startswith("output.")}
    missing = sorted(set(targets) - set(loaded))
    if missing:
        raise DataError(f"{path}: lacks {len(missing)} of the model's arrays, e.g. {missing[:3]}")
    for name, param in targets.items():
        if tuple(loaded[name].shape) != tuple(param.shape):
            raise DataError(f"{path}: {name} has shape {loaded[name].shape}, the model {param.shape}")
        param.set_data(loaded[name])
    return len(targets)


# PyTorch's parameter kind -> the Gluon parameter names it may map to (BatchNorm's weight and
# bias are Gluon's gamma and beta).
TORCH_KINDS = {"weight": ("_weight", "_gamma"), "bias": ("_bias", "_beta"),
               "running_mean": ("_running_mean",), "running_var": ("_running_var",)}


class MXNetChestXray(WorkloadMethods, ChestXray, Steps):
    def build_model(self):
        import mxnet as mx

        self.contexts = adapter.contexts(self.placement)
        mx.random.seed(self.spec.seed)
        self.model = build_model(self.spec.model)
        self.model.initialize(ctx=self.contexts)  # Gluon's default initialiser, as the model zoo leaves it
        crop = self.spec.data.crop
        self.model(mx.nd.zeros((1, 3, crop, crop), ctx=self.contexts[0]))  # the shapes are inferred at a first call
        self.weights_loaded = None
        if self.spec.weights:
            self.weights_loaded = load_imagenet_weights(mx, self.model, self.spec.weights)
        self.apply_mode()

    def build_training(self):
        import mxnet as mx
        from mxnet import gluon

        # The base rate times the number of devices, as the study did.
        self.trainer = make_trainer(self.model.collect_params(), self.spec.optimizer, self.placement,
                                    learning_rate=self.learning_rate, loss_scaling=self.loss_scaling)
        self.loss_fn = gluon.loss.SigmoidBinaryCrossEntropyLoss(from_sigmoid=False)  # mean over the 14 per sample
        if self.spec.input == "real":
            self.sampler, self.train_loader = training_loader(self)
        else:  # in host memory (device input: the source of its one copy)
            self.images = mx.nd.from_numpy(self.synthetic_images, zero_copy=True)
            self.labels = mx.nd.array(self.synthetic_labels, dtype="float32")
        if self.placement.rank == 0:
            self.eval_sampler = PathBatches(self.spec.batch)
            self.eval_loader = loader(self, evaluation_images(self.spec.data.crop), self.eval_sampler)

    def batches(self, order, epochs):
        import mxnet as mx

        if self.spec.input == "real":
            self.sampler.set_order(order, epochs)
            return self.train_loader
        # device input: everything on the first context, now; synthetic: the host arrays
        ctx = self.contexts[0] if self.spec.input == "resident" else mx.cpu()
        images, labels = self.images.as_in_context(ctx), self.labels.as_in_context(ctx)
        indices = mx.nd.array(order, dtype="int64", ctx=ctx)
        pooled = mx.nd.array(order % self.images.shape[0], dtype="int64", ctx=ctx)
        batches = ((mx.nd.take(images, pooled[i]), mx.nd.take(labels, indices[i])) for i in range(len(order)))
        if self.spec.input == "synthetic" and self.placement.device_kind == "gpu" and len(self.contexts) == 1:
            # each batch's copy pushed to MXNet's asynchronous engine before the batch before is handed on
            return one_ahead(tuple(array.as_in_context(self.contexts[0]) for array in batch) for batch in batches)
        return batches

    def eval_inputs(self, paths):
        self.eval_sampler.paths = list(paths)
        for images in self.eval_loader:
            yield images.asnumpy()

    def load_weights(self, weights):
        """torchvision's layouts are Gluon's (OIHW kernels, Dense (out, in)); the names map in
        order (both walk the layers depth first: conv0, norm0, the dense layers' norm1, conv1,
        norm2, conv2, the transitions, norm5, the classifier), BatchNorm's weight and bias to
        gamma and beta; num_batches_tracked has no counterpart."""
        import mxnet as mx

        names = [name for name in weights if not name.endswith(".num_batches_tracked")]
        params = list(self.model.collect_params().values())
        if len(names) != len(params):
            raise ValueError(f"{len(names)} PyTorch arrays for {len(params)} Gluon parameters")
        for name, param in zip(names, params):
            kind = name.rsplit(".", 1)[1]
            if not param.name.endswith(TORCH_KINDS.get(kind, ())) or tuple(weights[name].shape) != tuple(param.shape):
                raise ValueError(f"{name} {weights[name].shape} does not match {param.name} {param.shape}")
            param.set_data(mx.nd.array(weights[name], dtype="float32"))


WORKLOAD = MXNetChestXray
