"""MNIST CNNs in TensorFlow/Keras 3: one device, MirroredStrategy, MultiWorkerMirroredStrategy."""
import json
import os
import socket
import subprocess
import sys
import time
import traceback
import warnings
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # no INFO/WARNING spam from the C++ side
# tf.distribute reads dataset options while tracing a loop over a distributed dataset; harmless.
warnings.filterwarnings("ignore", message="To make it possible to preserve tf.data options")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from keras import layers  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchlib.record import peak_rss_bytes  # noqa: E402
from benchlib.run import NotApplicable, epoch_batches, main, resolve_device, shard, threads_per_process  # noqa: E402

STRATEGIES = ("single", "mirrored", "multiworker")
WORKER_ENV = "DLBENCH_TF_WORKER"  # set in the worker processes of a multiworker run: their index


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


def configure(spec, device_kind, processes, worker):
    """Thread pools and devices of this process, before anything initialises TF's runtime.

    Returns this process's devices for the strategy and the names of all devices of the run.
    """
    local = spec["devices"] // processes
    tf.config.threading.set_intra_op_parallelism_threads(threads_per_process(spec["threads"], processes))
    tf.config.threading.set_inter_op_parallelism_threads(local)  # enough to run the local replicas side by side
    gpus = tf.config.list_physical_devices("GPU")
    if device_kind == "gpu":
        names = [tf.config.experimental.get_device_details(g).get("device_name") for g in gpus[:spec["devices"]]]
        tf.config.set_visible_devices(gpus[:local] if worker is None else [gpus[worker]], "GPU")
        return [f"/gpu:{i}" for i in range(local)], names
    tf.config.set_visible_devices([], "GPU")
    if local > 1:  # MirroredStrategy on a CPU: one logical device per replica
        cpu, = tf.config.list_physical_devices("CPU")
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * local)
    return [f"/cpu:{i}" for i in range(local)], []


def make_strategy(name, devices):
    if name == "single":
        return tf.distribute.OneDeviceStrategy(devices[0])
    if name == "mirrored":
        return tf.distribute.MirroredStrategy(devices)
    return tf.distribute.MultiWorkerMirroredStrategy()  # the cluster comes from TF_CONFIG


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

        def worker_dataset(context):
            # A worker's replicas take its dataset's elements round robin: one shard each per global batch.
            replicas = context.num_replicas_in_sync
            local = replicas // context.num_input_pipelines
            first = context.input_pipeline_id * local
            shards = np.stack([shard(b, r, replicas) for b in batches for r in range(first, first + local)])
            return (tf.data.Dataset.from_tensor_slices(shards)
                    .map(lambda i: (tf.gather(images, i), tf.gather(labels, i)))
                    .prefetch(tf.data.AUTOTUNE))

        return strategy.distribute_datasets_from_function(worker_dataset), len(batches)

    def step(x, y):
        with tf.GradientTape() as tape:
            # Under tf.distribute Keras scales each replica's loss by 1/replicas, so the gradients
            # the optimizer sums over replicas, and the losses, add up to the global-batch mean.
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        loss_sum.update_state(loss)

    @tf.function
    def train_epoch(data):  # the whole epoch in one graph: no Python between the steps
        for batch in data:
            strategy.run(step, args=batch)

    @tf.function(input_signature=[tf.TensorSpec((), tf.float64)])
    def sum_over_workers(value):
        """The sum of one number from each worker process (one replica each); a barrier, too."""
        return strategy.reduce("SUM", strategy.run(tf.identity, args=(value,)), axis=None)

    @tf.function(reduce_retracing=True)
    def predict(x):
        return tf.argmax(model(x, training=False), axis=1, output_type=tf.int32)

    def accuracy(batch_size=1000):
        correct = sum(int(np.sum(predict(test_images[i:i + batch_size]).numpy() == test_labels[i:i + batch_size]))
                      for i in range(0, len(test_images), batch_size))
        return correct / len(test_images)

    if chief:
        run.describe(
            framework_version=tf.__version__,
            device={"kind": device_kind, "count": spec["devices"], "names": names},
            threads={"intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
                     "inter_op": tf.config.threading.get_inter_op_parallelism_threads(), "processes": processes},
            keras=keras.__version__,
        )
    for epoch in range(1, spec["epochs"] + 1):
        loss_sum.reset_state()
        if worker is not None:
            sum_over_workers(0)  # the others wait for worker 0's evaluation, outside the timed epoch
        start = time.perf_counter()
        data, steps = epoch_data(epoch)
        train_epoch(data)
        loss = float(loss_sum.result()) / steps  # waits for the last step, and across workers for all of them
        wall_s = time.perf_counter() - start
        if chief:
            eval_start = time.perf_counter()
            test_accuracy = accuracy()
            run.epoch(epoch, wall_s, steps * global_batch, loss,
                      metric={"test_accuracy": test_accuracy}, eval_s=time.perf_counter() - eval_start)
    peak = peak_rss_bytes()
    if worker is not None:
        peak = int(sum_over_workers(peak))  # the memory of all workers together
    if chief:
        gpu_bytes = tf.config.experimental.get_memory_info("GPU:0")["peak"] if device_kind == "gpu" else None
        run.finish(peak_rss=peak, peak_gpu_bytes=gpu_bytes)
    else:
        # Outlive worker 0, so that it never waits on a peer that is gone; the launcher closes
        # our stdin once worker 0 has exited.
        sys.stdin.read()


def free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:  # all bound at once, so that the ports differ
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def launch_workers(n):
    """Run this script once per device as a MultiWorkerMirroredStrategy worker; fail when any fails.

    Worker 0 writes the result; the run has succeeded once it has exited cleanly.
    """
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(n)]}
    workers = [
        subprocess.Popen([sys.executable, str(Path(__file__).resolve()), *sys.argv[1:]], stdin=subprocess.PIPE, env={
            **os.environ, WORKER_ENV: str(i),
            "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}}),
        })
        for i in range(n)
    ]
    chief, others = workers[0], workers[1:]
    try:
        while chief.poll() is None:
            failed = {i: w.returncode for i, w in enumerate(workers) if w.poll() not in (None, 0)}
            if failed:  # the others would wait for it in their collectives: stop them
                raise RuntimeError(f"TensorFlow worker(s) failed, index: exit code {failed}")
            time.sleep(0.2)
        if chief.returncode != 0:
            raise RuntimeError(f"TensorFlow worker 0 failed with exit code {chief.returncode}")
        for w in others:  # let them go
            w.stdin.close()
        for w in others:
            w.wait(timeout=60)
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()


def train(run):
    spec = run.spec
    strategy = spec["strategy"]
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown TensorFlow strategy {strategy!r}")
    if strategy == "single" and spec["devices"] != 1:
        raise ValueError("the single strategy runs on one device")
    device_kind = resolve_device(spec["device"], len(tf.config.list_physical_devices("GPU")), spec["devices"])
    worker = os.environ.get(WORKER_ENV)
    if worker is not None:
        try:
            train_process(spec, run, device_kind, int(worker))
        except BaseException:
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)  # not a normal exit, which can hang on TF's gRPC threads
    elif strategy == "multiworker" and spec["devices"] > 1:
        launch_workers(spec["devices"])
    else:
        train_process(spec, run, device_kind, None)


def count_parameters(model_name):
    return sum(int(np.prod(w.shape)) for w in build_model(model_name).trainable_weights)


if __name__ == "__main__":
    main(train, count_parameters)
