"""TensorFlow's adapter: devices, processes, strategies and the device sync (the contract:
dlbench.contract). What the TensorFlow workload modules share is beside it: the input pipelines
(loaders.py), the step (step.py), the uses of TensorFlow's private API (internals.py).

Strategies: "none" (OneDeviceStrategy), "mirrored" (MirroredStrategy over this process's
devices: its GPUs, or on a CPU one logical CPU device per replica) and "multiworker"
(MultiWorkerMirroredStrategy, one worker process per device, started by `launch` with a
TF_CONFIG cluster on 127.0.0.1). A multiworker run across nodes (dlbench.nodes) starts each
node's workers there, in one TF_CONFIG cluster that lists every node's workers at its host and
the run's ports.

Training is a custom training loop: `distribute` builds the run's input once, over its whole
order (a tf.data dataset per replica; replica r of a process takes shard r of each of the
process's batches; several replicas in a process read through
strategy.distribute_datasets_from_function), and `make_train_step` the step that runs
one `strategy.run(step)` on one batch, in the run's mode (step.py: a tf.function, eager, or
a tf.function whose gradients XLA compiles). The protocol owns the loop and calls the step once
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

from dlbench.frameworks import FRAMEWORKS, reported
from dlbench.nodes import HOSTS_VARIABLE, NodeError, devices_per_node, free_port, this_node
from dlbench.numerics import denormals, flushed, xla_flags_with_autotune
from dlbench.contract import Placement, verify_adapter
from dlbench.precision import op

STRATEGIES = ("none", *FRAMEWORKS["tensorflow"].strategies)
WORKER_ENV = "DLBENCH_TF_WORKER"  # set in the worker processes of a multiworker run: their index on the node
MEMORY_MEASURE = "tf.config.experimental.get_memory_info(GPU:0).peak"


def version():
    return tf.__version__


def visible_gpus():
    return len(tf.config.list_physical_devices("GPU"))  # lists them without starting the runtime


def cudnn_autotune(on):
    """On as TensorFlow ships; set all the same, so that a variable inherited from the caller's
    environment cannot turn it off. Read when the first convolution (or XLA cluster) runs."""
    os.environ["TF_CUDNN_USE_AUTOTUNE"] = "1" if on else "0"
    os.environ["XLA_FLAGS"] = xla_flags_with_autotune(os.environ.get("XLA_FLAGS", ""), on)  # mode xla
    return {name: os.environ[name] for name in ("TF_CUDNN_USE_AUTOTUNE", "XLA_FLAGS")}


def gpu_float32(policy):
    """TF32 in matrix products and convolutions, on as TensorFlow ships, off for highest."""
    tf.config.experimental.enable_tensor_float_32_execution(policy == "tf32")
    return {"tf.config.experimental.tensor_float_32_execution_enabled":
            tf.config.experimental.tensor_float_32_execution_enabled()}


def compile_cache(directory):
    """XLA's persistent cache of the clusters it compiles (mode xla, Keras' jit), in TF_XLA_FLAGS,
    read when XLA first compiles. TensorFlow's graphs (tf.function) are traced in each process:
    nothing of them is kept."""
    kept = [flag for flag in os.environ.get("TF_XLA_FLAGS", "").split() if not flag.startswith("--tf_xla_persistent_cache_")]
    os.environ["TF_XLA_FLAGS"] = " ".join(kept + [f"--tf_xla_persistent_cache_directory={directory}"])
    return {"TF_XLA_FLAGS": os.environ["TF_XLA_FLAGS"]}


def float32_product(a, b, placement):
    with tf.device("/gpu:0" if placement.device_kind == "gpu" else "/cpu:0"):
        return tf.linalg.matmul(tf.constant(a), tf.constant(b)).numpy()


def check(spec, device_kind):
    if spec.strategy not in STRATEGIES:
        raise ValueError(f"unknown TensorFlow strategy {spec.strategy!r}, expected one of {STRATEGIES}")
    if spec.strategy == "none" and spec.devices != 1:
        raise ValueError("strategy none runs on one device")


# --- processes -----------------------------------------------------------------------------------

def _cluster(spec, node):
    """Every worker's address, in global order: worker w at its node's host and the run's base
    port + w (node.rank's workers are node.rank * local + i); one node: 127.0.0.1, free ports."""
    if node.nodes == 1:
        hosts, port = ("127.0.0.1",), free_port(spec.devices)
    elif node.hosts is None:
        raise NodeError(f"TF_CONFIG lists every worker of every node, so it needs every node's host: nothing in "
                        f"the environment gives them (SLURM's SLURM_STEP_NODELIST, or {HOSTS_VARIABLE})")
    else:
        hosts, port = node.hosts, node.port
    local = devices_per_node(spec)
    return [f"{hosts[w // local]}:{port + w}" for w in range(spec.devices)]


def _launch_workers(spec):
    """This training process's command once per device of this node, as MultiWorkerMirroredStrategy
    workers of the run's whole cluster; fail when any of them fails."""
    node = this_node(spec)
    local = devices_per_node(spec)
    cluster = {"worker": _cluster(spec, node)}
    workers = [
        subprocess.Popen([sys.executable, "-m", "dlbench.protocol", *sys.argv[1:]], env={
            **os.environ, WORKER_ENV: str(i), "TF_CONFIG": json.dumps(
                {"cluster": cluster, "task": {"type": "worker", "index": node.global_rank(i, local)}}),
        })
        for i in range(local)
    ]
    try:
        while True:
            codes = [w.poll() for w in workers]
            failed = {i: code for i, code in enumerate(codes) if code not in (None, 0)}
            if failed:  # the others would wait for it in their collectives: stop them
                raise RuntimeError(f"TensorFlow worker(s) failed, local index: exit code {failed}")
            if all(code == 0 for code in codes):
                return
            time.sleep(0.2)
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
    """target(worker, *args): here, or in each of this node's worker processes (multiworker on N > 1
    devices), `worker` their index on the node."""
    worker = os.environ.get(WORKER_ENV)
    if worker is not None:
        sys.excepthook = _exit_on_error
        target(int(worker), *args)
    elif spec.strategy == "multiworker" and spec.devices > 1:
        _launch_workers(spec)
    else:
        target(0, *args)


def setup(spec, device_kind, worker):
    """Threads and devices of this process (`worker`: its index on the node), before anything starts
    TF's runtime; then the strategy."""
    multiworker = spec.strategy == "multiworker"
    node = this_node(spec)
    local_workers = devices_per_node(spec) if multiworker else 1
    processes = spec.devices if multiworker else 1
    rank = node.global_rank(worker, local_workers)  # the worker's TF_CONFIG task index
    local = spec.devices // processes  # replicas this process drives
    threads = max(1, node.threads // local_workers)
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(local)  # enough to run the local replicas side by side
    gpus = tf.config.list_physical_devices("GPU")
    if device_kind == "gpu":
        names = [tf.config.experimental.get_device_details(g).get("device_name")
                 for g in gpus[:devices_per_node(spec)]]  # this node's
        for gpu in gpus:  # allocate as the run needs, not the whole GPU: its peak memory is then its own
            tf.config.experimental.set_memory_growth(gpu, True)
        tf.config.set_visible_devices(gpus[worker:worker + 1] if processes > 1 else gpus[:local], "GPU")
        devices = [f"/gpu:{i}" for i in range(local)]
    else:
        names = []
        tf.config.set_visible_devices([], "GPU")
        if local > 1:  # MirroredStrategy on a CPU: one logical device per replica
            cpu, = tf.config.list_physical_devices("CPU")
            tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * local)
        devices = [f"/cpu:{i}" for i in range(local)]
    if spec.strategy == "none":
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
        "devices_used": {"kind": placement.device_kind, "count": placement.processes * placement.local_devices,
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
        # service fails a cluster whose task left): wait until its server, up until its process
        # ends, takes no more connections; on this node or another alike.
        chief = json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"][0]
        host, port = chief.rsplit(":", 1)
        while True:
            try:
                socket.create_connection((host, int(port)), timeout=5).close()
            except OSError:
                return
            time.sleep(0.2)


# --- precision: the compute ops of a traced forward pass -------------------------------------------

# TensorFlow's compute ops (the graph's, and the fused ones of its optimised graphs, by name)
COMPUTE_OPS = ("MatMul", "_FusedMatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "Conv2D", "_FusedConv2D",
               "Conv3D", "DepthwiseConv2dNative", "Conv2DBackpropInput")


def forward_ops(fn, *args):
    """The compute ops of fn(*args) traced as a tf.function (dlbench.precision.op each): every
    op of COMPUTE_OPS that the outputs depend on, in the graph and in the functions it calls
    (a while loop's body, counted once per iteration: its static trip count), with the dtype its
    operands are multiplied in (its T attribute) and its FLOPs from its static shapes."""
    graph = tf.function(fn).get_concrete_function(*args).graph
    return [op(o.type, dtype, flops) for o, dtype, flops in _graph_ops(graph, 1)]


def _graph_ops(graph, times):
    from dlbench.frameworks.tensorflow.internals import function_graph

    for o in _live_ops(graph):
        if o.type in COMPUTE_OPS:
            dtype = o.get_attr("Ta" if o.type == "BatchMatMulV3" else "T")
            yield o, tf.as_dtype(dtype).name, times * _flops(o)
        elif o.type in ("While", "StatelessWhile"):
            yield from _graph_ops(function_graph(graph, o.get_attr("body").name), times * _trip_count(o, graph))
        elif o.type in ("PartitionedCall", "StatefulPartitionedCall"):
            yield from _graph_ops(function_graph(graph, o.get_attr("f").name), times)


def _live_ops(graph):
    """The graph's ops that its outputs (and stateful control outputs) depend on, in graph order:
    not the ops traced only for their static shapes (Keras' RNN runs its first step once outside
    the loop for them), which TensorFlow prunes before it runs the graph."""
    live, todo = set(), [t.op for t in graph.outputs] + list(graph.control_outputs)
    while todo:
        o = todo.pop()
        if o.name not in live:
            live.add(o.name)
            todo.extend([t.op for t in o.inputs] + list(o.control_inputs))
    return [o for o in graph.get_operations() if o.name in live]


def _static(tensor):
    value = tf.get_static_value(tensor)
    if value is None and tensor.op.type == "Max":  # Keras' RNN: maximum_iterations = max(input_length)
        value = tf.get_static_value(tensor.op.inputs[0])
        value = None if value is None else value.max()
    return value


def _trip_count(loop, graph):
    """A while loop's static trip count: its maximum_iterations (loop input 1, while_v2's), or the
    bound of its condition's `counter < bound`."""
    from dlbench.frameworks.tensorflow.internals import function_graph

    cond = function_graph(graph, loop.get_attr("cond").name)
    bounds = [_static(loop.inputs[1])] + [_static(o.inputs[1]) for o in cond.get_operations() if o.type == "Less"]
    bounds = [int(b) for b in bounds if b is not None and int(b) >= 0]
    if not bounds:
        raise ValueError(f"the while loop {loop.name} has no static trip count: its FLOPs are unknown")
    return min(bounds)


def _flops(o):
    """2 x multiply-adds of one compute op, from its static shapes."""
    shape = [t.shape.as_list() for t in o.inputs]
    out = o.outputs[0].shape.as_list()
    if o.type in ("MatMul", "_FusedMatMul"):
        inner = shape[0][0] if o.get_attr("transpose_a") else shape[0][1]
    elif o.type.startswith("BatchMatMul"):
        inner = shape[0][-2] if o.get_attr("adj_x") else shape[0][-1]
    elif o.type == "Conv2DBackpropInput":  # each of out_backprop's values times a window of the filter
        return 2.0 * np.prod(shape[2]) * np.prod(shape[1][:3])
    elif o.type == "DepthwiseConv2dNative":
        inner = np.prod(shape[1][:2])
    else:  # Conv2D, Conv3D, _FusedConv2D: each output value, a window of the filter over its input channels
        inner = np.prod(shape[1][:-1])
    return 2.0 * np.prod(out) * inner


verify_adapter(__name__)  # the contract (dlbench.contract.Adapter), checked as this module loads
