"""MNIST CNNs in TensorFlow/Keras 3: one device, MirroredStrategy, MultiWorkerMirroredStrategy."""
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

from parallel import (configure, distribute_epoch, finish, make_accuracy, make_strategy, make_train_epoch,  # noqa: E402
                      make_worker_sum, run_strategy, threads_description, timed_epoch)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dlbench.run import epoch_batches, main  # noqa: E402


def build_model(name):
    """The models every framework builds; 402,442 and 4,104,202 parameters (channels last)."""
    def conv(filters):
        return [layers.Conv2D(filters, 3, padding="same", activation="relu"), layers.MaxPooling2D(2)]

    if name == "small":
        body = [*conv(32), layers.Flatten(), layers.Dense(64, activation="relu")]
    elif name == "large":
        body = [*conv(128), *conv(256), *conv(512), layers.Flatten(),
                layers.Dense(512, activation="relu"), layers.Dense(512, activation="relu")]
    else:
        raise ValueError(f"unknown model {name!r}")
    return keras.Sequential([keras.Input((28, 28, 1)), *body, layers.Dense(10)])


def load_split(spec, split):
    """Images as NHWC float32 and int32 labels, limited as the spec says."""
    images = np.load(spec["data"][f"{split}_images"], mmap_mode="r")
    labels = np.load(spec["data"][f"{split}_labels"], mmap_mode="r")
    limit = spec[f"{split}_images"] or len(images)
    return np.ascontiguousarray(images[:limit].transpose(0, 2, 3, 1)), labels[:limit].astype(np.int32)


def train_process(spec, run, device_kind, worker):
    """One process: the whole run, or one worker of a multiworker run (worker 0 reports)."""
    processes = 1 if worker is None else spec["devices"]
    devices, names = configure(spec, device_kind, processes, worker)
    strategy = make_strategy(spec["strategy"], devices)
    chief = worker in (None, 0)
    keras.utils.set_random_seed(spec["seed"])  # the same initial weights in every worker

    with tf.device("/cpu:0"):  # the input pipeline's copy; no NumPy copy is kept beside it
        images, labels = map(tf.constant, load_split(spec, "train"))
    test_images, test_labels = load_split(spec, "test") if chief else (None, None)
    global_batch = spec["batch"] * spec["devices"]

    with strategy.scope():
        model = build_model(spec["model"])
        opt = spec["optimizer"]
        optimizer = keras.optimizers.Adam(learning_rate=opt["lr"], beta_1=opt["beta1"], beta_2=opt["beta2"],
                                          epsilon=opt["eps"])
        optimizer.build(model.trainable_variables)  # its slots are mirrored too, made here and not in a replica
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        loss_sum = keras.metrics.Sum()  # per replica, summed over the replicas only when read

    def epoch_data(epoch):
        """The shared order as a distributed tf.data pipeline: replica r gets shard r of each global batch."""
        batches = epoch_batches(len(images), global_batch, spec["seed"], epoch)

        def make_dataset(shards):
            return (tf.data.Dataset.from_tensor_slices(shards)
                    .map(lambda i: (tf.gather(images, i), tf.gather(labels, i)))
                    .prefetch(tf.data.AUTOTUNE))

        return distribute_epoch(strategy, batches, make_dataset), len(batches)

    train_epoch = make_train_epoch(strategy, model, optimizer, loss_fn, loss_sum)
    sum_over_workers = make_worker_sum(strategy)

    accuracy = make_accuracy(model, test_images, test_labels)

    if chief:
        run.describe(
            framework_version=tf.__version__,
            device={"kind": device_kind, "count": spec["devices"], "names": names},
            threads=threads_description(processes),
            keras=keras.__version__,
        )
    for epoch in range(1, spec["epochs"] + 1):
        wall_s, loss, steps = timed_epoch(lambda: epoch_data(epoch), train_epoch, loss_sum, worker, sum_over_workers)
        if chief:
            eval_start = time.perf_counter()
            test_accuracy = accuracy()
            run.epoch(epoch, wall_s, steps * global_batch, loss,
                      metric={"test_accuracy": test_accuracy}, eval_s=time.perf_counter() - eval_start)
    finish(run, device_kind, worker, sum_over_workers)


def train(run):
    run_strategy(run, train_process)


def count_parameters(model_name):
    return sum(int(np.prod(w.shape)) for w in build_model(model_name).trainable_weights)


if __name__ == "__main__":
    main(train, count_parameters)
