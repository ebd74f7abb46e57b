"""TensorFlow's backend: devices, processes, strategies and the device sync (the contract:
dlbench.contract), and what the TensorFlow workload modules share (input pipelines, the step).

Strategies: "single" (OneDeviceStrategy), "mirrored" (MirroredStrategy over this process's
devices: its GPUs, or on a CPU one logical CPU device per replica) and "multiworker"
(MultiWorkerMirroredStrategy, one worker process per device, started by `launch` with a
TF_CONFIG cluster on 127.0.0.1).

Training is a custom training loop: `distribute` builds the run's input once, over its whole
order (a tf.data dataset per replica; replica r of a process takes shard r of each of the
process's batches; several replicas in a process read through
strategy.distribute_datasets_from_function), and `make_train_step` a tf.function that runs
one `strategy.run(step)` on one batch. The protocol owns the loop and calls the step once
per batch, as Keras' fit does with steps_per_execution=1: per-step calls now, where the old
scripts traced a whole epoch into one graph, because the shared protocol needs the loop in
Python. The batch shapes are fixed (drop_remainder), so the step is traced once.
"""
import json
import os
import socket
import subprocess
import sys
import time
import traceback

import keras
import numpy as np
import tensorflow as tf

from dlbench.frameworks import reported
from dlbench.numerics import denormals, flushed
from dlbench.contract import Placement, shard

STRATEGIES = ("single", "mirrored", "multiworker")
WORKER_ENV = "DLBENCH_TF_WORKER"  # set in the worker processes of a multiworker run: their index
MEMORY_MEASURE = "tf.config.experimental.get_memory_info(GPU:0).peak"


def version():
    return tf.__version__


def visible_gpus():
    return len(tf.config.list_physical_devices("GPU"))  # lists them without starting the runtime


def check(spec, device_kind):
    if spec.strategy not in STRATEGIES:
        raise ValueError(f"unknown TensorFlow strategy {spec.strategy!r}, expected one of {STRATEGIES}")
    if spec.strategy == "single" and spec.devices != 1:
        raise ValueError("the single strategy runs on one device")


# --- processes -----------------------------------------------------------------------------------

def _free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:  # all bound at once, so that the ports differ
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _launch_workers(n):
    """This training process's command once per device, as MultiWorkerMirroredStrategy workers;
    wait for worker 0 (which writes the results), fail when any worker fails."""
    cluster = {"worker": [f"127.0.0.1:{port}" for port in _free_ports(n)]}
    workers = [
        subprocess.Popen([sys.executable, "-m", "dlbench.protocol", *sys.argv[1:]], stdin=subprocess.PIPE, env={
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
        for w in others:  # let them go (see teardown)
            w.stdin.close()
        for w in others:
            w.wait(timeout=60)
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()


def _exit_on_error(kind, value, tb):
    """A worker's uncaught error: its traceback, then exit 1 at once, not by the interpreter's
    normal exit, which can hang on TF's gRPC threads (the launcher then stops the others)."""
    traceback.print_exception(kind, value, tb)
    sys.stderr.flush()
    os._exit(1)


def launch(spec, target, args):
    """target(worker, *args): here, or in each of N worker processes (multiworker on N > 1 devices)."""
    worker = os.environ.get(WORKER_ENV)
    if worker is not None:
        sys.excepthook = _exit_on_error
        target(int(worker), *args)
    elif spec.strategy == "multiworker" and spec.devices > 1:
        _launch_workers(spec.devices)
    else:
        target(0, *args)


def setup(spec, device_kind, rank):
    """Threads and devices of this process, before anything starts TF's runtime; then the strategy."""
    processes = spec.devices if spec.strategy == "multiworker" else 1
    local = spec.devices // processes  # replicas this process drives
    threads = max(1, spec.threads // processes)
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(local)  # enough to run the local replicas side by side
    gpus = tf.config.list_physical_devices("GPU")
    if device_kind == "gpu":
        names = [tf.config.experimental.get_device_details(g).get("device_name") for g in gpus[:spec.devices]]
        tf.config.set_visible_devices(gpus[rank:rank + 1] if processes > 1 else gpus[:local], "GPU")
        devices = [f"/gpu:{i}" for i in range(local)]
    else:
        names = []
        tf.config.set_visible_devices([], "GPU")
        if local > 1:  # MirroredStrategy on a CPU: one logical device per replica
            cpu, = tf.config.list_physical_devices("CPU")
            tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * local)
        devices = [f"/cpu:{i}" for i in range(local)]
    if spec.strategy == "single":
        strategy = tf.distribute.OneDeviceStrategy(devices[0])
    elif spec.strategy == "mirrored":
        strategy = tf.distribute.MirroredStrategy(devices)
    else:
        strategy = tf.distribute.MultiWorkerMirroredStrategy()  # the cluster comes from TF_CONFIG
    return Placement(rank=rank, processes=processes, device_kind=device_kind, local_devices=local,
                     threads=threads, handles={"strategy": strategy, "names": names,
                                               "worker_sum": _make_worker_sum(strategy)})


def strategy(placement):
    return placement.handles["strategy"]


def _make_worker_sum(strategy):
    """A tf.function: the sum of one number from each worker process (one replica each); a barrier, too."""
    @tf.function(input_signature=[tf.TensorSpec((), tf.float64)])
    def sum_over_workers(value):
        return strategy.reduce("SUM", strategy.run(tf.identity, args=(value,)), axis=None)

    return sum_over_workers


def barrier(placement):
    if placement.processes > 1:
        placement.handles["worker_sum"](tf.constant(0.0, tf.float64))


def sync(placement, pending):
    if placement.device_kind == "gpu":
        tf.test.experimental.sync_devices()
    barrier(placement)


def to_float(value):
    return float(value)


def mean_over_processes(value, placement):
    if placement.processes == 1:
        return value
    return float(placement.handles["worker_sum"](tf.constant(value, tf.float64))) / placement.processes


def gpu_allocator_peak(placement):
    if placement.device_kind != "gpu":
        return {}
    return {MEMORY_MEASURE: tf.config.experimental.get_memory_info("GPU:0")["peak"]}


def describe(placement):
    build = tf.sysconfig.get_build_info()
    gpu = placement.device_kind == "gpu"
    return {
        "device": {"kind": placement.device_kind, "count": placement.processes * placement.local_devices,
                   "names": placement.handles["names"]},
        "threads": {"intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
                    "inter_op": tf.config.threading.get_inter_op_parallelism_threads(),
                    "processes": placement.processes},
        "keras": keras.__version__,
        "cuda": build.get("cuda_version") if gpu else None, "cudnn": build.get("cudnn_version") if gpu else None,
        "framework_cpu": cpu_kernels(build),
    }


def cpu_kernels(build):
    """What TensorFlow says it uses on the CPU: oneDNN (on by default on x86 Linux; the
    TF_ENABLE_ONEDNN_OPTS variable turns it off) and the compiler of its kernels."""
    def onednn_enabled():
        from dlbench.frameworks.tensorflow import internals

        return internals.onednn_enabled()

    return {"onednn_enabled": reported(onednn_enabled),
            "TF_ENABLE_ONEDNN_OPTS": os.environ.get("TF_ENABLE_ONEDNN_OPTS"),
            "cpu_compiler": build.get("cpu_compiler")}


def flushes_denormals():
    """Denormal float32s times one in TensorFlow's CPU kernel (eager; 2**20 of them: its intra-op threads)."""
    with tf.device("/cpu:0"):
        inputs = tf.constant(denormals())
        return flushed(tf.multiply(inputs, tf.ones_like(inputs)).numpy())


def teardown(placement):
    if placement.processes > 1 and placement.rank != 0:
        # Outlive worker 0, so that it never waits on a peer that is gone (TF's coordination
        # service fails a cluster whose task left); the launcher closes our stdin once worker 0
        # has exited.
        sys.stdin.read()


# --- what the workload modules share -------------------------------------------------------------

def host_tensor(array):
    """A numpy array as a tensor in host memory, for tf.data to gather from (no device copy)."""
    with tf.device("/cpu:0"):
        return tf.constant(array)


def loader_options(workers):
    """tf.data options of a loader with `workers` workers: each map call in one thread
    (max_intra_op_parallelism 1) and no parallelism or prefetch that tf.data would add itself
    (map_parallelization, inject_prefetch off), so that with 0 workers it loads in the
    consuming thread; with workers > 0, a private pool of `workers` threads runs the maps."""
    options = tf.data.Options()
    options.threading.max_intra_op_parallelism = 1
    options.experimental_optimization.map_parallelization = False
    options.experimental_optimization.inject_prefetch = False
    if workers:
        options.threading.private_threadpool_size = workers  # not the compute threads' pools
    return options


def distribute(placement, order, make_dataset):
    """The run's order as this process's input, made once and iterated across every block:
    replica r of the process takes shard r (dlbench.contract.shard) of each of the process's
    batches.

    order: this process's index batches (steps, process batch), every epoch back to back, as
    long as the run could take. make_dataset(shards): shards is an int array (steps,
    per-replica batch), the shards of one replica; it returns a tf.data.Dataset with one
    element (a per-replica batch) per row, read lazily (as far as the steps and the loader's
    prefetch go: the run stops before the end of its order).

    One replica per process (single, multiworker): the process's dataset itself, which
    strategy.run takes as the replica's input. Several (mirrored): a distributed dataset,
    strategy.distribute_datasets_from_function with one input pipeline per replica
    (InputReplicationMode.PER_REPLICA), its elements left in host memory for strategy.run to
    copy. Neither uses tf.distribute's multi-device iterator: it is built on tf.data's
    GeneratorDataset, whose construction in TF 2.21 sets glibc's M_TRIM_THRESHOLD to 128 KB
    for the whole process ("Memory patch applied"), after which every large allocation
    faults its pages in afresh: the steps that follow take twice the CPU time on a CPU
    (DenseNet-121, batch 2: 500,000 minor page faults per step instead of 42,000).
    """
    dist = strategy(placement)
    local = placement.local_devices
    if local == 1:
        return make_dataset(order)

    def dataset_fn(context):
        return make_dataset(np.stack([shard(b, context.input_pipeline_id, local) for b in order]))

    options = tf.distribute.InputOptions(experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA,
                                         experimental_fetch_to_device=False)
    return dist.distribute_datasets_from_function(dataset_fn, options)


def make_train_step(placement, replica_step):
    """A tf.function of one batch (per replica, from `distribute`): strategy.run(replica_step)
    and the mean loss of this process's batch, on the device (no cross-worker reduction per
    step; the protocol reduces the block's sum once, outside the clock).

    replica_step(*batch) returns a Keras loss, which Keras scales by 1/replicas under
    tf.distribute (so that the gradients summed over replicas are the global batch's mean):
    the process's mean is the sum of its replicas' losses times replicas / local replicas.
    Fixed batch shapes: traced once.
    """
    dist = strategy(placement)

    @tf.function(reduce_retracing=True)
    def train_step(batch):
        losses = dist.experimental_local_results(dist.run(replica_step, args=batch))
        return tf.add_n(losses) * (dist.num_replicas_in_sync / len(losses))

    return train_step


def make_adam(spec, learning_rate):
    opt = spec.optimizer
    return keras.optimizers.Adam(learning_rate=learning_rate, beta_1=opt.beta1, beta_2=opt.beta2, epsilon=opt.eps)


class StepMethods:
    """What every TensorFlow workload module does the same way: one replica's step with a
    GradientTape (self.model, self.loss_fn, self.optimizer), the per-batch call of the step
    compiled by make_train_step (self.step), and the parameter count."""

    def replica_step(self, inputs, labels):
        with tf.GradientTape() as tape:
            loss = self.loss_fn(labels, self.model(inputs, training=True))
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        return loss

    def train_step(self, batch):
        return self.step(batch)

    def parameter_count(self):
        return sum(int(np.prod(w.shape)) for w in self.model.trainable_weights)
