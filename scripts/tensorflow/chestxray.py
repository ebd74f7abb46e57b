"""ChestX-ray14 DenseNet-121 in TensorFlow/Keras 3: one device, MirroredStrategy,
MultiWorkerMirroredStrategy (the MNIST script's engines, from parallel.py), and the tf.data
loader benchmark (workload chestxray-loader).

Training (workload chestxray): keras.applications.DenseNet121 (no top, global average pool) and a
Dense head of 14 logits, binary cross-entropy on the logits, Adam with the learning rate times the
device count. Data "real": the preprocessed (264 x 264 grey JPEG) training images through tf.data
(read_file, decode_jpeg, random 224 crop, random horizontal flip, ImageNet normalisation of the
grey value replicated to 3 channels), `workers` map calls at a time; "synthetic": one random
float32 tensor of the training set's size (and random 0/1 labels), made in memory before training,
gathered in the same batch order, nothing decoded. Either way the batches follow the shared
order (dlbench.run.epoch_batches; each device takes its shard of a global batch).

After each epoch, outside the timed span, worker 0 computes the validation loss and macro AUC on
the valid split's real images (centre crop; in synthetic mode too, so that eval_s compares; only
when the spec names no images does it use random validation images). At the end, the test AUC
(macro and per finding) goes into the record's extra.
"""
import os
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # no INFO/WARNING spam from the C++ side
# tf.distribute reads dataset options while tracing a loop over a distributed dataset; harmless.
warnings.filterwarnings("ignore", message="To make it possible to preserve tf.data options")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from keras import layers  # noqa: E402

from parallel import (configure, distribute_epoch, finish, make_strategy, make_train_epoch,  # noqa: E402
                      make_worker_sum, run_strategy, threads_description, timed_epoch)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dlbench.chestxray import (CROP_SIZE, FINDINGS, FORMAT_SUFFIXES, IMAGENET_MEAN, IMAGENET_STD,  # noqa: E402
                                SYNTHETIC_POOL, read_labels_csv, split_files)
from dlbench.errors import DataError  # noqa: E402
from dlbench.metrics import auc_per_finding, macro_auc  # noqa: E402
from dlbench.run import epoch_batches, main, resolve_device  # noqa: E402

# The spec's model: DenseNet-121 as in the paper and torchvision (keras.applications builds exactly this).
DENSENET121 = {"blocks": [6, 12, 24, 16], "growth": 32, "bottleneck": 4, "compression": 0.5, "init_features": 64}


# --- model -------------------------------------------------------------------------------------

def build_model(classes=len(FINDINGS), crop=CROP_SIZE, weights=None):
    """DenseNet-121 (BN-ReLU-conv, bias-free convs, average-pool transitions, final BN + ReLU +
    global average pool; Keras' default initialisers) and a Dense head of `classes` logits:
    6,968,206 trainable parameters with 14 classes. weights: None, or a Keras weights file of the
    headless DenseNet-121 (e.g. densenet121_weights_tf_dim_ordering_tf_kernels_notop.h5), which
    loads everything but the head."""
    if weights is not None and not Path(weights).is_file():
        raise FileNotFoundError(f"weights file {weights} does not exist")
    backbone = keras.applications.DenseNet121(include_top=False, weights=weights, input_shape=(crop, crop, 3),
                                              pooling="avg")
    return keras.Model(backbone.input, layers.Dense(classes, name="findings")(backbone.output), name="densenet121")


def check_model_spec(model):
    other = {key: model.get(key) for key in DENSENET121}
    if other != DENSENET121:
        raise ValueError(f"keras.applications builds DenseNet-121 only ({DENSENET121}); the spec asks for {other}")
    return model.get("classes", len(FINDINGS))


# --- data --------------------------------------------------------------------------------------

def decoder(paths):
    """tf.io.decode_jpeg for JPEG files (what preprocessing writes for training), decode_png for PNGs."""
    suffixes = {Path(p).suffix.lower() for p in paths}
    if suffixes <= set(FORMAT_SUFFIXES["jpeg"]):
        return tf.io.decode_jpeg
    if suffixes <= set(FORMAT_SUFFIXES["png"]):
        return tf.io.decode_png
    raise DataError(f"the images must be all JPEG or all PNG, found {sorted(suffixes)}")


def normalise(patch):
    """uint8 [H, W, 1] grey -> float32 [H, W, 3]: grey replicated, ImageNet mean and std."""
    return (tf.cast(patch, tf.float32) * (1 / 255) - IMAGENET_MEAN) / IMAGENET_STD  # no TF tensor at import


def train_sample_fn(paths, labels, seed, epoch, crop):
    """index -> (image, labels): decode, random crop, random horizontal flip, normalise. Each sample's
    random state comes from the seed, the epoch and its index (stateless ops), not from the
    worker that decodes it."""
    decode = decoder(paths)
    paths, labels = tf.constant(paths), tf.constant(labels)
    epoch_seed = tf.constant([seed, epoch], tf.int64)

    def sample(index):
        crop_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(
            tf.random.experimental.stateless_fold_in(epoch_seed, index), 2))
        image = decode(tf.io.read_file(tf.gather(paths, index)), channels=1)
        patch = tf.image.stateless_random_crop(image, (crop, crop, 1), seed=crop_seed)
        patch = tf.image.stateless_random_flip_left_right(patch, seed=flip_seed)
        return normalise(patch), tf.gather(labels, index)

    return sample


def eval_sample_fn(paths, labels, crop):
    """index -> (image, labels): decode, centre crop, normalise."""
    decode = decoder(paths)
    paths, labels = tf.constant(paths), tf.constant(labels)

    def sample(index):
        image = decode(tf.io.read_file(tf.gather(paths, index)), channels=1)
        shape = tf.shape(image)
        patch = tf.image.crop_to_bounding_box(image, (shape[0] - crop) // 2, (shape[1] - crop) // 2, crop, crop)
        return normalise(patch), tf.gather(labels, index)

    return sample


def loader_options():
    """Exactly `workers` map calls at a time, each in one thread: with workers 0 tf.data decodes in
    the consuming thread, without the map parallelisation or prefetch that it would add itself."""
    options = tf.data.Options()
    options.threading.max_intra_op_parallelism = 1
    options.experimental_optimization.map_parallelization = False
    options.experimental_optimization.inject_prefetch = False
    return options


def loader(indices, sample, batch, workers, drop_remainder=True):
    """The framework's loader: tf.data over sample indices, `sample` mapped by `workers` parallel
    calls (in order; none: in the consuming thread), batched, prefetched when workers > 0."""
    data = tf.data.Dataset.from_tensor_slices(np.asarray(indices, dtype=np.int64).reshape(-1))
    if workers:
        data = data.map(sample, num_parallel_calls=workers, deterministic=True)
    else:
        data = data.map(sample)
    data = data.batch(batch, drop_remainder=drop_remainder)
    if workers:
        data = data.prefetch(tf.data.AUTOTUNE)
    return data.with_options(loader_options())


def synthetic_set(n, classes, crop, seed, salt):
    """Random float32 images [min(n, SYNTHETIC_POOL), crop, crop, 3] and 0/1 labels [n, classes],
    made in host memory."""
    with tf.device("/cpu:0"):
        images = tf.random.stateless_normal((min(n, SYNTHETIC_POOL), crop, crop, 3), seed=(seed, salt))
        labels = tf.cast(tf.random.stateless_uniform((n, classes), seed=(seed, salt + 1), minval=0, maxval=2,
                                                     dtype=tf.int32), tf.float32)
    return images, labels


def bce_with_logits(logits, labels):
    """Mean binary cross-entropy over all samples and findings, from logits (numerically stable)."""
    return float(np.mean(np.maximum(logits, 0) - logits * labels + np.log1p(np.exp(-np.abs(logits)))))


# --- training ----------------------------------------------------------------------------------

def train_process(spec, run, device_kind, worker):
    """One process: the whole run, or one worker of a multiworker run (worker 0 reports)."""
    processes = 1 if worker is None else spec["devices"]
    devices, names = configure(spec, device_kind, processes, worker)
    strategy = make_strategy(spec["strategy"], devices)
    chief = worker in (None, 0)
    if spec["data"] not in ("real", "synthetic"):
        raise ValueError(f"data must be real or synthetic, got {spec['data']!r}")
    classes = check_model_spec(spec["model"])
    crop, workers, seed = spec.get("crop", CROP_SIZE), spec["workers"], spec["seed"]
    global_batch = spec["batch"] * spec["devices"]
    keras.utils.set_random_seed(seed)  # the same initial weights in every worker

    splits = read_labels_csv(spec["labels"])
    n_train = len(splits["train"][0])
    if spec["data"] == "real":
        train_paths, train_labels = split_files(spec["labels"], spec["images"], "train")
        make_sample = lambda epoch: train_sample_fn(train_paths, train_labels, seed, epoch, crop)  # noqa: E731
    else:  # the input pipeline's copy on the host, as MNIST keeps its data
        images, labels = synthetic_set(n_train, classes, crop, seed, 0)

    def eval_data(split):
        """A split's evaluation loader: the real images, centre-cropped (in synthetic mode too)."""
        paths, targets = split_files(spec["labels"], spec["images"], split)
        return loader(np.arange(len(paths)), eval_sample_fn(paths, targets, crop), global_batch, workers,
                      drop_remainder=False)

    valid_data = eval_data("valid") if chief else None

    with strategy.scope():
        model = build_model(classes, crop, spec.get("weights"))
        opt = spec["optimizer"]
        if opt.get("name", "adam") != "adam":
            raise ValueError(f"unknown optimizer {opt['name']!r}")
        optimizer = keras.optimizers.Adam(learning_rate=opt["lr"] * spec["devices"], beta_1=opt["beta1"],
                                          beta_2=opt["beta2"], epsilon=opt["eps"])
        optimizer.build(model.trainable_variables)  # its slots are mirrored too, made here and not in a replica
        loss_fn = keras.losses.BinaryCrossentropy(from_logits=True)  # the mean over samples and findings
        loss_sum = keras.metrics.Sum()  # per replica, summed over the replicas only when read

    def epoch_data(epoch):
        batches = epoch_batches(n_train, global_batch, seed, epoch)
        if spec["data"] == "real":
            sample = make_sample(epoch)

            def make_dataset(shards):
                return loader(shards, sample, shards.shape[1], workers)
        else:
            def make_dataset(shards):
                return (tf.data.Dataset.from_tensor_slices(shards)
                        .map(lambda i: (tf.gather(images, i % images.shape[0]), tf.gather(labels, i)))
                        .prefetch(tf.data.AUTOTUNE))
        return distribute_epoch(strategy, batches, make_dataset), len(batches)

    train_epoch = make_train_epoch(strategy, model, optimizer, loss_fn, loss_sum)
    sum_over_workers = make_worker_sum(strategy)

    @tf.function(input_signature=[tf.TensorSpec((None, crop, crop, 3), tf.float32)])
    def predict(x):
        return model(x, training=False)

    def evaluate(data):
        """(mean BCE, AUC per finding) over a split; AUCs from the logits (the same ranks as sigmoid)."""
        logits, targets = [], []
        for x, y in data:
            logits.append(predict(x).numpy())
            targets.append(y.numpy())
        logits, targets = np.concatenate(logits).astype(np.float64), np.concatenate(targets)
        return bce_with_logits(logits, targets), auc_per_finding(targets.astype(np.uint8), logits, FINDINGS)

    if chief:
        run.describe(
            framework_version=tf.__version__,
            device={"kind": device_kind, "count": spec["devices"], "names": names},
            threads={**threads_description(processes), "loader_workers": workers},
            keras=keras.__version__,
            data=spec["data"],
            evaluation_images="real",
            learning_rate=opt["lr"] * spec["devices"],
            global_batch=global_batch,
            train_images=n_train,
        )
    for epoch in range(1, spec["epochs"] + 1):
        wall_s, loss, steps = timed_epoch(lambda: epoch_data(epoch), train_epoch, loss_sum, worker, sum_over_workers)
        if chief:
            eval_start = time.perf_counter()
            valid_loss, per_finding = evaluate(valid_data)
            metric = {"valid_loss": valid_loss}
            valid_auc = macro_auc(per_finding)
            if valid_auc is not None:  # None when no finding has both classes in the valid split
                metric["valid_auc"] = valid_auc
            run.epoch(epoch, wall_s, steps * global_batch, loss, metric=metric,
                      eval_s=time.perf_counter() - eval_start)
    extra = {}
    if chief:
        test_start = time.perf_counter()
        test_loss, per_finding = evaluate(eval_data("test"))
        extra = {"test_auc": {"macro": macro_auc(per_finding), "per_finding": per_finding},
                 "test_loss": test_loss, "test_eval_s": time.perf_counter() - test_start}
    finish(run, device_kind, worker, sum_over_workers, **extra)


# --- the loader benchmark ----------------------------------------------------------------------

def loader_benchmark(run):
    """The real-mode training loader alone: decode, crop, flip, normalise, batches moved to the
    device through the same distributed-dataset path as training, no model."""
    spec = {**run.spec, "devices": 1}
    device_kind = resolve_device(spec["device"], len(tf.config.list_physical_devices("GPU")), 1)
    devices, names = configure(spec, device_kind, 1, None)
    strategy = make_strategy("single", devices)
    crop, workers, seed, batch = spec.get("crop", CROP_SIZE), spec["workers"], spec["seed"], spec["batch"]
    paths, labels = split_files(spec["labels"], spec["images"], "train")

    def consume(x, y):  # touch every batch on the device
        return tf.reduce_sum(x[:, 0, 0, 0]) + tf.reduce_sum(y[:, 0])

    @tf.function
    def drain(data):
        total = tf.constant(0.0)
        for b in data:
            total += strategy.run(consume, args=b)
        return total

    run.describe(
        framework_version=tf.__version__,
        device={"kind": device_kind, "count": 1, "names": names},
        threads={**threads_description(1), "loader_workers": workers},
        keras=keras.__version__,
    )
    def epoch_data(epoch):
        batches = epoch_batches(len(paths), batch, seed, epoch)
        sample = train_sample_fn(paths, labels, seed, epoch, crop)
        return distribute_epoch(strategy, batches, lambda shards: loader(shards, sample, batch, workers)), batches.size

    # Trace the loop before the clock (no element is read): the epochs time the loader, not tracing.
    drain.get_concrete_function(epoch_data(1)[0])
    for epoch in range(1, spec["epochs"] + 1):
        start = time.perf_counter()
        data, samples = epoch_data(epoch)
        drain(data).numpy()
        run.epoch(epoch, time.perf_counter() - start, samples, None, metric={}, eval_s=None)
    finish(run, device_kind, None, None)


def train(run):
    if run.spec["workload"] == "chestxray-loader":
        loader_benchmark(run)
    else:
        run_strategy(run, train_process)


def count_parameters(model_name):
    if model_name != "densenet121":
        raise ValueError(f"unknown model {model_name!r}, expected densenet121")
    return sum(int(np.prod(w.shape)) for w in build_model().trainable_weights)


if __name__ == "__main__":
    main(train, count_parameters)
