"""IMDB sentiment LSTM in TensorFlow/Keras 3: one device, a tf.data loader with N parallel workers."""
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # no INFO/WARNING spam from the C++ side

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from keras import layers  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dlbench.record import peak_rss_bytes  # noqa: E402
from dlbench.run import NotApplicable, epoch_batches, main, resolve_device  # noqa: E402
from parallel import make_accuracy  # noqa: E402


def build_model(vocabulary, embedding, hidden, maxlen=500, classes=2):
    """Embedding -> LSTM (the last step's output) -> Dense logits. Keras' LSTM has one bias vector,
    so it has 4 * hidden parameters fewer than PyTorch's and MXNet's (771,842 for 5000,128,128).

    The LSTM keeps the defaults that let Keras run it as one cuDNN kernel on a GPU; the
    sequences are padded in front, so the last step is the review's last token.
    """
    return keras.Sequential([
        keras.Input((maxlen,), dtype="int32"),
        layers.Embedding(vocabulary, embedding),
        layers.LSTM(hidden),
        layers.Dense(classes),
    ])


def load_split(spec, split):
    """Token sequences (int32) and labels (int32), the first N reviews as the spec says."""
    sequences = np.load(spec["data"][f"{split}_sequences"], mmap_mode="r")
    labels = np.load(spec["data"][f"{split}_labels"], mmap_mode="r")
    limit = spec[f"{split}_reviews"] or len(sequences)
    return np.array(sequences[:limit], dtype=np.int32), labels[:limit].astype(np.int32)


def configure(spec, device_kind):
    """Thread pools and the device, before anything initialises TF's runtime; the device names."""
    tf.config.threading.set_intra_op_parallelism_threads(spec["threads"])
    tf.config.threading.set_inter_op_parallelism_threads(1)  # one device, one op at a time
    gpus = tf.config.list_physical_devices("GPU")
    if device_kind == "gpu":
        tf.config.set_visible_devices(gpus[:1], "GPU")
        return [tf.config.experimental.get_device_details(gpus[0]).get("device_name")]
    tf.config.set_visible_devices([], "GPU")
    return []


def train(run):
    spec = run.spec
    if spec["grad"] == "sparse":
        raise NotApplicable("sparse embedding gradients are a PyTorch sweep dimension")
    if spec["grad"] != "dense":
        raise ValueError(f"unknown gradient kind {spec['grad']!r}")
    device_kind = resolve_device(spec["device"], len(tf.config.list_physical_devices("GPU")), 1)
    names = configure(spec, device_kind)
    keras.utils.set_random_seed(spec["seed"])
    workers, batch = spec["workers"], spec["batch"]

    with tf.device("/cpu:0"):  # the loader's copy, gathered from on the host as a loader would
        sequences, labels = map(tf.constant, load_split(spec, "train"))
    test_sequences, test_labels = load_split(spec, "test")
    steps = len(sequences) // batch

    m, opt = spec["model"], spec["optimizer"]
    model = build_model(m["vocabulary"], m["embedding"], m["hidden"], m["maxlen"], m["classes"])
    schedule = keras.optimizers.schedules.ExponentialDecay(
        opt["lr"], decay_steps=opt["lr_step_epochs"] * steps, decay_rate=opt["lr_factor"], staircase=True)
    optimizer = keras.optimizers.Adam(learning_rate=schedule, beta_1=opt["beta1"], beta_2=opt["beta2"],
                                      epsilon=opt["eps"])
    optimizer.build(model.trainable_variables)  # its slots made here, not while tracing the epoch
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def epoch_data(epoch):
        """The shared order through tf.data: index batches -> gather, by `workers` threads of the
        loader's own, prefetching `workers` batches; with 0 workers it all runs in the training thread."""
        data = (tf.data.Dataset.from_tensor_slices(epoch_batches(len(sequences), batch, spec["seed"], epoch))
                .map(lambda i: (tf.gather(sequences, i), tf.gather(labels, i)),
                     num_parallel_calls=workers or None))
        if workers:
            data = data.prefetch(workers)
            options = tf.data.Options()
            options.threading.private_threadpool_size = workers  # not the compute threads' pools
            data = data.with_options(options)
        return data

    @tf.function
    def train_epoch(data):  # the whole epoch in one graph: no Python between the steps
        loss_sum = tf.constant(0.0)
        for x, y in data:
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            loss_sum += loss
        return loss_sum

    accuracy = make_accuracy(model, test_sequences, test_labels)

    run.describe(
        framework_version=tf.__version__,
        device={"kind": device_kind, "count": 1, "names": names},
        threads={"intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
                 "inter_op": tf.config.threading.get_inter_op_parallelism_threads(), "loader_workers": workers},
        keras=keras.__version__,
    )
    for epoch in range(1, spec["epochs"] + 1):
        # The schedule at this epoch's first step, without float32's noise (0.0009, not 0.00090000004).
        lr = float(f"{float(optimizer.learning_rate):.6g}")
        start = time.perf_counter()
        loss = float(train_epoch(epoch_data(epoch))) / steps  # materialised: waits for the last step
        wall_s = time.perf_counter() - start
        eval_start = time.perf_counter()
        test_accuracy = accuracy()
        run.epoch(epoch, wall_s, steps * batch, loss, metric={"test_accuracy": test_accuracy},
                  eval_s=time.perf_counter() - eval_start, lr=lr)
    gpu_bytes = tf.config.experimental.get_memory_info("GPU:0")["peak"] if device_kind == "gpu" else None
    run.finish(peak_rss=peak_rss_bytes(), peak_gpu_bytes=gpu_bytes)


def count_parameters(name):
    """`name` is 'VOCABULARY,EMBEDDING,HIDDEN'."""
    vocabulary, embedding, hidden = map(int, name.split(","))
    return sum(int(np.prod(w.shape)) for w in build_model(vocabulary, embedding, hidden).trainable_weights)


if __name__ == "__main__":
    main(train, count_parameters)
