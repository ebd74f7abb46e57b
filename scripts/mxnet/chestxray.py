"""DenseNet-121 on ChestX-ray14 in MXNet Gluon, and the Gluon DataLoader benchmark.

workload "chestxray": the model zoo's DenseNet-121 (14 logits, sigmoid + binary cross-entropy)
trained with Adam on one device or data parallel over N contexts through a KVStore (the code
MNIST uses, parallel.py); data "real" reads the preprocessed JPEGs through a Gluon Dataset
(mx.image.imread, MXNet's OpenCV) and DataLoader with spec["workers"] worker processes;
"synthetic" iterates random tensors made in memory before training, in the same batch order.
After each epoch, outside its time: validation loss and macro AUC; at the end, test AUC.

workload "chestxray-loader": the real-mode training loader alone (decode, random crop, flip,
normalise, batches moved to the device), no model.
"""
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dlbench.chestxray import (CROP_SIZE, FINDINGS, IMAGENET_MEAN, IMAGENET_STD, SYNTHETIC_POOL,  # noqa: E402
                                sample_rng, split_files)
from dlbench.errors import DataError  # noqa: E402
from dlbench.metrics import auc_per_finding, macro_auc  # noqa: E402
from dlbench.run import epoch_batches, main  # noqa: E402
from parallel import (SharedOrderBatches, check_strategy, device_description, import_mxnet,  # noqa: E402
                      make_trainer, peak_gpu_bytes, peak_rss_with_children, resolve_contexts, train_epoch)

# mxnet is imported inside the functions (parallel.import_mxnet): its thread pools read
# OMP_NUM_THREADS and MXNET_CPU_WORKER_NTHREADS once, at import, and the thread count comes
# from the spec.

MODELS = ("densenet121",)


def build_model(name="densenet121", classes=len(FINDINGS)):
    """The Gluon model zoo's DenseNet-121 (6-12-24-16 blocks, growth 32, bottleneck 4,
    compression 0.5, 64 initial features; BN-ReLU-conv) with a `classes`-output Dense head:
    6,968,206 trainable parameters with 14 outputs. Nothing is downloaded (pretrained=False)."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}, expected one of {MODELS}")
    from mxnet.gluon.model_zoo import vision

    return vision.densenet121(classes=classes)


def check_model_spec(model):
    expected = {"classes": 14, "blocks": [6, 12, 24, 16], "growth": 32, "bottleneck": 4,
                "compression": 0.5, "init_features": 64}
    if model is not None and {k: model.get(k) for k in expected} != expected:
        raise ValueError(f"the Gluon model zoo's DenseNet-121 is {expected}, the spec asks for {model}")


def load_imagenet_weights(mx, net, path, ctx):
    """All of a DenseNet-121 parameter file but its classifier: a Gluon save_parameters file
    (the model zoo's format, names like features.0.weight) or an exported one (arg:/aux:
    names like densenet0_conv0_weight). Returns the number of arrays loaded."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such weights file")
    net(mx.nd.zeros((1, 3, CROP_SIZE, CROP_SIZE), ctx=ctx))  # finish the deferred initialisation
    loaded = mx.nd.load(str(path))
    by_structure = net._collect_params_with_prefix()  # features.0.weight -> Parameter
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


# --- data --------------------------------------------------------------------------------------

def image_dataset(paths, labels, seed, crop=CROP_SIZE):
    """A Gluon Dataset of (float32 3 x crop x crop image, float32 [14] labels).

    A key (epoch, index) gives the training transform: a random crop and a horizontal flip
    with p=0.5, drawn from dlbench.chestxray.sample_rng(seed, epoch, index) (top, left, then
    the flip, as in every framework); a plain index gives the evaluation transform, the centre
    crop. Decoding is mx.image.imread (OpenCV inside MXNet); crop, flip, scaling and ImageNet
    normalisation are MXNet operators; the grey channel is replicated to three.
    """
    import mxnet as mx
    from mxnet import gluon, nd

    mean, std = tuple(float(v) for v in IMAGENET_MEAN), tuple(float(v) for v in IMAGENET_STD)

    class ChestXrayImages(gluon.data.Dataset):
        def __len__(self):
            return len(paths)

        def __getitem__(self, key):
            epoch, index = key if isinstance(key, tuple) else (None, key)
            path = paths[index]
            try:
                image = mx.image.imread(path, flag=0)  # H x W x 1 uint8
            except mx.base.MXNetError as err:
                raise DataError(f"{path}: unreadable image ({str(err).splitlines()[0]})") from err
            height, width = image.shape[:2]
            if height < crop or width < crop:
                raise DataError(f"{path}: {height} x {width} is smaller than the {crop} x {crop} crop")
            if epoch is None:
                top, left, flip = (height - crop) // 2, (width - crop) // 2, False
            else:
                rng = sample_rng(seed, epoch, index)
                top, left = int(rng.integers(0, height - crop + 1)), int(rng.integers(0, width - crop + 1))
                flip = bool(rng.random() < 0.5)
            patch = mx.image.fixed_crop(image, left, top, crop, crop)
            if flip:
                patch = nd.flip(patch, axis=1)
            tensor = nd.image.to_tensor(patch)  # 1 x crop x crop float32 in [0, 1]
            tensor = nd.image.normalize(nd.repeat(tensor, repeats=3, axis=0), mean=mean, std=std)
            return tensor, labels[index]

    return ChestXrayImages()


def synthetic_batches(mx, images, labels, global_batch, seed, epoch):
    """The in-memory tensors in the shared epoch order: (images, labels) global batches."""
    for batch in epoch_batches(labels.shape[0], global_batch, seed, epoch):
        yield (mx.nd.take(images, mx.nd.array(batch % images.shape[0], dtype="int32")),
               mx.nd.take(labels, mx.nd.array(batch, dtype="int32")))


def close_loaders(*loaders):
    """Stop the loaders' worker processes (the script ends with os._exit, which would leave them)."""
    for loader in loaders:
        pool = getattr(loader, "_worker_pool", None)
        if pool is not None:
            pool.terminate()
            pool.join()
            loader._worker_pool = None


# --- evaluation --------------------------------------------------------------------------------

def evaluate(mx, net, loader, loss_fn, ctx):
    """(mean sample loss, {finding: AUC or None}) of a split, on one context, inference mode."""
    loss_sum, scores, truth = mx.nd.zeros((1,), ctx=ctx), [], []
    for images, labels in loader:
        labels = labels.as_in_context(ctx)
        logits = net(images.as_in_context(ctx))
        loss_sum += loss_fn(logits, labels).sum()
        scores.append(mx.nd.sigmoid(logits))
        truth.append(labels)
    scores = mx.nd.concat(*scores, dim=0).asnumpy()
    truth = mx.nd.concat(*truth, dim=0).asnumpy().astype(np.uint8)
    return loss_sum.asscalar() / len(scores), auc_per_finding(truth, scores, FINDINGS)


# --- the two workloads -------------------------------------------------------------------------

def train(run):
    spec = run.spec
    if spec["workload"] == "chestxray-loader":
        return benchmark_loader(run)
    if spec["workload"] != "chestxray":
        raise ValueError(f"this script runs chestxray or chestxray-loader, not {spec['workload']!r}")
    n, mode, workers = spec["devices"], spec["data"], spec["workers"]
    check_strategy(spec["strategy"], n)
    if mode not in ("real", "synthetic"):
        raise ValueError(f"data must be real or synthetic, got {mode!r}")
    check_model_spec(spec.get("model"))
    crop = spec.get("crop", CROP_SIZE)
    mx, threads = import_mxnet(spec["threads"], n)
    from mxnet import gluon

    device_kind, contexts = resolve_contexts(mx, spec["device"], n)
    global_batch = spec["batch"] * n
    pin = device_kind == "gpu"
    timeout = max(120, int(spec["timeout_s"]))

    # The loaders (and their worker processes) first, while this process is still small.
    train_paths, train_labels = split_files(spec["labels"], spec["images"], "train")
    n_train = len(train_paths)
    sampler, train_loader = SharedOrderBatches(n_train, global_batch, spec["seed"], keyed=True), None
    if mode == "real":
        train_loader = gluon.data.DataLoader(image_dataset(train_paths, train_labels, spec["seed"], crop),
                                             batch_sampler=sampler, num_workers=workers, pin_memory=pin,
                                             timeout=timeout)
    # Validation and test read the real images in both modes (the evaluation time is comparable).
    eval_loaders = {
        split: gluon.data.DataLoader(image_dataset(*split_files(spec["labels"], spec["images"], split), spec["seed"], crop),
                                     batch_size=spec["batch"], last_batch="keep", num_workers=workers,
                                     pin_memory=pin, timeout=timeout)
        for split in ("valid", "test")
    }
    try:
        synthetic = None
        if mode == "synthetic":
            rng = np.random.default_rng([spec["seed"], 1])
            pool = min(n_train, SYNTHETIC_POOL)
            synthetic = (mx.nd.array(rng.standard_normal((pool, 3, crop, crop), dtype=np.float32)),
                         mx.nd.array(rng.integers(0, 2, (n_train, len(FINDINGS))).astype(np.float32)))
            mx.nd.waitall()

        mx.random.seed(spec["seed"])
        net = build_model("densenet121", classes=len(FINDINGS))
        net.initialize(ctx=contexts)  # Gluon's default initialiser, as the model zoo leaves it
        loaded = None
        if spec.get("weights"):
            loaded = load_imagenet_weights(mx, net, spec["weights"], contexts[0])
        # static_alloc only: with static_shape, every change between the evaluation and the
        # training batch shape would re-plan the graph inside the timed epoch.
        net.hybridize(static_alloc=True)
        # The base rate times the number of devices, as the study did.
        trainer = make_trainer(mx, net.collect_params(), spec["optimizer"], device_kind, lr_scale=n)
        loss_fn = gluon.loss.SigmoidBinaryCrossEntropyLoss(from_sigmoid=False)  # mean over the 14 per sample

        run.describe(
            framework_version=mx.__version__,
            device=device_description(device_kind, n),
            threads={**threads, "contexts": n, "loader_workers": workers if mode == "real" else 0,
                     "eval_loader_workers": workers},
            evaluation_images="real",  # validation and test read the real images in both modes
            weights_loaded=loaded,
        )
        for epoch in range(1, spec["epochs"] + 1):
            sampler.set_epoch(epoch)
            batches = (train_loader if mode == "real"
                       else synthetic_batches(mx, *synthetic, global_batch, spec["seed"], epoch))
            wall_s, loss, samples = train_epoch(mx, batches, net, loss_fn, trainer, contexts, global_batch)
            eval_start = time.perf_counter()
            valid_loss, per_finding = evaluate(mx, net, eval_loaders["valid"], loss_fn, contexts[0])
            valid_auc = macro_auc(per_finding)
            metric = {"valid_loss": valid_loss, **({"valid_auc": valid_auc} if valid_auc is not None else {})}
            run.epoch(epoch, wall_s, samples, loss, metric=metric, eval_s=time.perf_counter() - eval_start)
        test_start = time.perf_counter()
        test_loss, per_finding = evaluate(mx, net, eval_loaders["test"], loss_fn, contexts[0])
        test_s = time.perf_counter() - test_start
        peak_rss = peak_rss_with_children()
        run.finish(peak_rss=peak_rss, peak_gpu_bytes=peak_gpu_bytes(mx, device_kind),
                   test_auc={"macro": macro_auc(per_finding), "per_finding": per_finding},
                   test_loss=test_loss, test_eval_s=test_s)
    finally:
        close_loaders(train_loader, *eval_loaders.values())


def benchmark_loader(run):
    """The real-mode training loader alone: decode, random crop, flip, normalise, to the device."""
    spec = run.spec
    workers, batch = spec["workers"], spec["batch"]
    mx, threads = import_mxnet(spec["threads"], 1)
    from mxnet import gluon

    device_kind, contexts = resolve_contexts(mx, spec["device"], 1)
    paths, labels = split_files(spec["labels"], spec["images"], "train")
    sampler = SharedOrderBatches(len(paths), batch, spec["seed"], keyed=True)
    loader = gluon.data.DataLoader(image_dataset(paths, labels, spec["seed"], spec.get("crop", CROP_SIZE)),
                                   batch_sampler=sampler, num_workers=workers, pin_memory=device_kind == "gpu",
                                   timeout=max(120, int(spec["timeout_s"])))
    try:
        run.describe(
            framework_version=mx.__version__,
            device=device_description(device_kind, 1),
            threads={**threads, "loader_workers": workers},
        )
        for epoch in range(1, spec["epochs"] + 1):
            sampler.set_epoch(epoch)
            start = time.perf_counter()
            samples = 0
            for images, targets in loader:
                images, targets = images.as_in_context(contexts[0]), targets.as_in_context(contexts[0])
                samples += images.shape[0]
            mx.nd.waitall()  # the copies are asynchronous too
            wall_s = time.perf_counter() - start
            run.epoch(epoch, wall_s, samples, None, metric={}, eval_s=None)
        run.finish(peak_rss=peak_rss_with_children(), peak_gpu_bytes=peak_gpu_bytes(mx, device_kind))
    finally:
        close_loaders(loader)


def count_parameters(model_name):
    import mxnet as mx

    net = build_model(model_name)
    net.initialize()
    net(mx.nd.zeros((1, 3, CROP_SIZE, CROP_SIZE)))  # the shapes are inferred at the first call
    return sum(int(np.prod(p.shape)) for p in net.collect_params().values() if p.grad_req != "null")


if __name__ == "__main__":
    main(train, count_parameters)
