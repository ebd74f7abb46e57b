"""Devices and data parallelism that the TensorFlow scripts share (MNIST, ChestX-ray).

Three strategies: "single" (OneDeviceStrategy), "mirrored" (MirroredStrategy over this
process's devices) and "multiworker" (MultiWorkerMirroredStrategy, one process per device,
started by `launch_workers`). A script gives `run_strategy` its `train_process(spec, run,
device_kind, worker)`; that calls `configure` and `make_strategy`, builds its model under the
strategy's scope, and uses `distribute_epoch`, `make_train_epoch`, `timed_epoch` and `finish`.
"""
import json
import os
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import tensorflow as tf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dlbench.record import peak_rss_bytes  # noqa: E402
from dlbench.run import resolve_device, shard, threads_per_process  # noqa: E402

STRATEGIES = ("single", "mirrored", "multiworker")
WORKER_ENV = "DLBENCH_TF_WORKER"  # set in the worker processes of a multiworker run: their index


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


def threads_description(processes):
    """The thread settings of this process, for run.describe."""
    return {"intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
            "inter_op": tf.config.threading.get_inter_op_parallelism_threads(), "processes": processes}


def distribute_epoch(strategy, batches, make_dataset):
    """One epoch's shared order as a distributed tf.data pipeline: replica r gets shard r of each
    global batch.

    batches: the epoch's index batches (n_batches, global_batch), from dlbench.run.epoch_batches.
    make_dataset(shards): shards is an int array (n_batches x local replicas, per-device batch),
    this input pipeline's shards in the order its replicas take them; returns a tf.data.Dataset
    with one element (a per-device batch) per row.
    """
    def worker_dataset(context):
        # A worker's replicas take its dataset's elements round robin: one shard each per global batch.
        replicas = context.num_replicas_in_sync
        local = replicas // context.num_input_pipelines
        first = context.input_pipeline_id * local
        shards = np.stack([shard(b, r, replicas) for b in batches for r in range(first, first + local)])
        return make_dataset(shards)

    return strategy.distribute_datasets_from_function(worker_dataset)


def make_train_epoch(strategy, model, optimizer, loss_fn, loss_sum):
    """A tf.function that trains one epoch over a distributed dataset of (inputs, targets),
    the whole epoch in one graph: no Python between the steps. loss_sum (a keras Sum metric made
    under the strategy's scope) collects the global-batch mean loss of each step."""
    def step(x, y):
        with tf.GradientTape() as tape:
            # Under tf.distribute Keras scales each replica's loss by 1/replicas, so the gradients
            # the optimizer sums over replicas, and the losses, add up to the global-batch mean.
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        loss_sum.update_state(loss)

    @tf.function
    def train_epoch(data):
        for batch in data:
            strategy.run(step, args=batch)

    return train_epoch


def make_worker_sum(strategy):
    """A tf.function: the sum of one number from each worker process (one replica each); a barrier, too."""
    @tf.function(input_signature=[tf.TensorSpec((), tf.float64)])
    def sum_over_workers(value):
        return strategy.reduce("SUM", strategy.run(tf.identity, args=(value,)), axis=None)

    return sum_over_workers


def timed_epoch(epoch_data, train_epoch, loss_sum, worker, sum_over_workers):
    """Train one epoch; returns (wall seconds, mean loss per step, steps).

    epoch_data() -> (distributed dataset, steps), made inside the timed span. In a multiworker
    run every worker first waits for worker 0 (which evaluates between epochs), outside the timing.
    """
    loss_sum.reset_state()
    if worker is not None:
        sum_over_workers(0)  # the others wait for worker 0's evaluation, outside the timed epoch
    start = time.perf_counter()
    data, steps = epoch_data()
    train_epoch(data)
    loss = float(loss_sum.result()) / steps  # waits for the last step, and across workers for all of them
    return time.perf_counter() - start, loss, steps


def finish(run, device_kind, worker, sum_over_workers, **extra):
    """End of a process: worker 0 (or the only process) writes the peak memory (RSS summed over
    the worker processes, GPU peak of the first GPU) and `extra`; the other workers wait."""
    peak = peak_rss_bytes()
    if worker is not None:
        peak = int(sum_over_workers(peak))  # the memory of all workers together
    if worker in (None, 0):
        gpu_bytes = tf.config.experimental.get_memory_info("GPU:0")["peak"] if device_kind == "gpu" else None
        run.finish(peak_rss=peak, peak_gpu_bytes=gpu_bytes, **extra)
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
    """Run the main script once per device as a MultiWorkerMirroredStrategy worker; fail when any fails.

    Worker 0 writes the result; the run has succeeded once it has exited cleanly.
    """
    script = str(Path(sys.argv[0]).resolve())
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(n)]}
    workers = [
        subprocess.Popen([sys.executable, script, *sys.argv[1:]], stdin=subprocess.PIPE, env={
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


def run_strategy(run, train_process):
    """Check the spec's strategy and run train_process(spec, run, device_kind, worker): in this
    process (worker None), or, for multiworker on N > 1 devices, in N worker processes of this
    script (worker 0..N-1)."""
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


def make_accuracy(model, inputs, labels):
    """accuracy(batch_size) -> the share of (inputs, labels) that the model classifies right."""
    @tf.function(reduce_retracing=True)
    def predict(x):
        return tf.argmax(model(x, training=False), axis=1, output_type=tf.int32)

    def accuracy(batch_size=1000):
        correct = sum(int(np.sum(predict(inputs[i:i + batch_size]).numpy() == labels[i:i + batch_size]))
                      for i in range(0, len(inputs), batch_size))
        return correct / len(inputs)

    return accuracy
