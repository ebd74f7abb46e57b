"""MXNet's adapter: contexts, threads and the engine sync (the contract: dlbench.contract).
What the MXNet workload modules share is beside it: the Trainer and the data-parallel step
(step.py), Gluon's DataLoader (loaders.py), the uses of MXNet's private API (internals.py).

Strategies: "none" (one context) and "kvstore" (data parallel over N contexts of ONE
process: each context runs forward and backward on its contiguous slice of the batch, and the
Gluon Trainer sums the N gradients in a KVStore, 'device' on GPUs and 'local' on the CPU, and
applies one update, the same on every context). On one node a run is one process (rank 0).
Across nodes (kvstore) it is MXNet's parameter server, configured by the DMLC_* variables
(dlbench.nodes): node 0's process also starts the scheduler, every node's a server, and each
is a worker over its node's contexts; the Trainer sums every worker's gradients in a
'dist_sync' kvstore and each worker applies the same update. A worker's rank is its kv.rank,
the scheduler's numbering, which need not follow the nodes'.

mxnet is imported only once `setup` has set the thread variables: its thread pools read
OMP_NUM_THREADS and MXNET_CPU_WORKER_NTHREADS once, when the library loads. Nothing here or
in the workload modules imports it at module level (the protocol imports both before setup).
"""
import ctypes
import os
import subprocess
import sys
import traceback

import numpy as np

from dlbench.contract import Placement, verify_adapter
from dlbench.errors import FrameworkError, NotApplicable
from dlbench.frameworks import FRAMEWORKS, reported
from dlbench.machine import gpus
from dlbench.nodes import devices_per_node, this_node
from dlbench.numerics import denormals, flushed
from dlbench.precision import op
from dlbench.processes import die_with_parent

STRATEGIES = ("none", *FRAMEWORKS["mxnet"].strategies)
# The kvstore key of mean_over_processes' sums: beyond every Trainer's parameter indices (its
# keys), small enough for the dist kvstore's key-to-server hash (key * 9973 in an int).
LOSS_KEY = 100_000
SERVICES_EXIT_S = 60  # the scheduler and servers end once every worker has left the kvstore


def version():
    import mxnet

    return mxnet.__version__


def visible_gpus():
    """GPUs this build of MXNet can use (0 in a CPU-only build).

    The protocol asks before `setup`; importing mxnet in this process now would start its
    thread pools before the thread variables are set, so a child process answers.
    """
    if "mxnet" in sys.modules:
        return sys.modules["mxnet"].context.num_gpus()
    out = subprocess.run([sys.executable, "-c", "import mxnet; print(mxnet.context.num_gpus())"],
                         check=False, capture_output=True, text=True)
    if out.returncode != 0:
        last = out.stderr.strip().splitlines()[-1:] or ["no error output"]
        raise FrameworkError(f"mxnet cannot be imported to count its GPUs: {last[0]}")
    return int(out.stdout.split()[-1])


def check(spec, device_kind):
    if spec.strategy not in STRATEGIES:
        raise ValueError(f"unknown MXNet strategy {spec.strategy!r}, expected one of {STRATEGIES}")
    if spec.strategy == "none" and spec.devices != 1:
        raise ValueError(f"strategy none runs on one device, not {spec.devices}")
    if spec.precision == "mixed-float16" and device_kind == "cpu":
        raise NotApplicable("precision mixed-float16: MXNet's AMP computes float16 on GPUs only: its CPU operators "
                            "have no float16 kernels (FullyConnected: 'FP16 gemm on cpu not implemented'); on a CPU "
                            "AMP's 16-bit type is bfloat16")


def launch(spec, target, args):
    """Every strategy runs in this one process: its contexts are its devices. Across nodes this
    process is its node's parameter-server worker; it starts the node's server (and on node 0
    the scheduler) first, and reaps them once teardown has left the kvstore."""
    if spec.nodes == 1:
        target(0, *args)
        return
    node = this_node(spec)
    variables = dmlc_variables(node)
    # Each scheduler or server runs MXNet's server loop when `import mxnet` sees its role;
    # with this process's threads to share, one thread each is enough to sum the gradients.
    roles = ["scheduler", "server"] if node.rank == 0 else ["server"]
    services = [subprocess.Popen([sys.executable, "-c", "import mxnet"], preexec_fn=die_with_parent,
                                 env={**os.environ, **variables, "DMLC_ROLE": role,
                                      "OMP_NUM_THREADS": "1", "MXNET_CPU_WORKER_NTHREADS": "1"})
                for role in roles]
    os.environ.update(variables, DMLC_ROLE="worker")  # read when setup imports mxnet and makes the kvstore
    try:
        target(0, *args)
    except BaseException:
        # A failed worker's kvstore would wait at its exit barrier for the others, forever: the
        # node ends here, as a failed node, its scheduler and server with it.
        traceback.print_exc()
        sys.stderr.flush()
        for service in services:
            service.kill()
        os._exit(1)
    for service in services:
        try:
            service.wait(timeout=SERVICES_EXIT_S)
        except subprocess.TimeoutExpired:
            service.kill()
            service.wait()


def dmlc_variables(node):
    """The parameter server's DMLC_* variables of a node's processes (but their role): the
    scheduler at node 0's address and the run's base port, one server and one worker a node."""
    variables = {"DMLC_PS_ROOT_URI": node.address, "DMLC_PS_ROOT_PORT": str(node.port),
                 "DMLC_NUM_SERVER": str(node.nodes), "DMLC_NUM_WORKER": str(node.nodes)}
    if node.hosts and not {"DMLC_NODE_HOST", "DMLC_INTERFACE"} & set(os.environ):
        variables["DMLC_NODE_HOST"] = node.hosts[node.rank]  # the address the others reach this node at
    return variables


def thread_variables(total_threads, contexts):
    """The engine runs each context's operators on a worker pool of its own, each operator
    with OMP_NUM_THREADS threads: N CPU contexts share the run's threads, as PyTorch's DDP
    processes do."""
    return {"OMP_NUM_THREADS": max(1, total_threads // contexts), "MXNET_CPU_WORKER_NTHREADS": 1}


def cudnn_autotune(on):
    """On (1, within cuDNN's workspace limit) as MXNet ships; set all the same, so that an
    inherited variable cannot change it. Read when a convolution is first created."""
    os.environ["MXNET_CUDNN_AUTOTUNE_DEFAULT"] = "1" if on else "0"
    return {"MXNET_CUDNN_AUTOTUNE_DEFAULT": os.environ["MXNET_CUDNN_AUTOTUNE_DEFAULT"]}


def gpu_float32(policy):
    """MXNet 1.9 has no switch of its own: NVIDIA's libraries' override, read when they load.
    highest: NVIDIA_TF32_OVERRIDE=0 (cuBLAS and cuDNN never use TF32); tf32: unset (cuDNN 8
    may use TF32 in convolutions; whether MXNet's cuBLAS calls do, the measured product says)."""
    if policy == "highest":
        os.environ["NVIDIA_TF32_OVERRIDE"] = "0"
    else:
        os.environ.pop("NVIDIA_TF32_OVERRIDE", None)
    return {"NVIDIA_TF32_OVERRIDE": os.environ.get("NVIDIA_TF32_OVERRIDE")}


def compile_cache(directory):
    return {}  # a hybridized block's graph is built in the process; MXNet keeps none across processes


def float32_product(a, b, placement):
    import mxnet as mx

    context = contexts(placement)[0]
    return mx.nd.dot(mx.nd.array(a, ctx=context), mx.nd.array(b, ctx=context)).asnumpy()


def setup(spec, device_kind, rank):
    if rank != 0:
        raise ValueError(f"an MXNet run is one process a node, rank 0, not {rank}")
    node = this_node(spec)
    local_devices = devices_per_node(spec)
    threads = thread_variables(node.threads, local_devices)
    wanted = {name: str(value) for name, value in threads.items()}
    if "mxnet" in sys.modules and any(os.environ.get(k) != v for k, v in wanted.items()):
        raise FrameworkError("mxnet was imported before its thread variables were set; "
                             f"it would not use {wanted}")
    os.environ.update(wanted)
    import mxnet as mx

    contexts = [mx.gpu(i) if device_kind == "gpu" else mx.cpu(i) for i in range(local_devices)]
    handles = {"contexts": contexts, "strategy": spec.strategy, "thread_variables": threads, "loaders": []}
    rank, processes = 0, 1
    if spec.nodes > 1:
        # This node's worker (launch set the DMLC_* variables); it waits here for every node's.
        kv = mx.kv.create("dist_sync")
        kv.init(LOSS_KEY, mx.nd.zeros(1, dtype="float64"))
        handles["kvstore"] = kv
        rank, processes = kv.rank, kv.num_workers
    return Placement(rank=rank, processes=processes, device_kind=device_kind, local_devices=local_devices,
                     threads=node.threads, handles=handles)


def contexts(placement):
    """This process's contexts, one per device of its node; the first one evaluates."""
    return placement.handles["contexts"]


def kvstore(placement):
    """The dist_sync kvstore of a run across nodes, else None."""
    return placement.handles.get("kvstore")


# --- the protocol's calls ---------------------------------------------------------------------

def barrier(placement):
    """Every worker of a run across nodes; one process has nothing to wait for."""
    if placement.processes > 1:
        from dlbench.frameworks.mxnet import internals

        internals.barrier(kvstore(placement))


def sync(placement, pending):
    import mxnet as mx

    mx.nd.waitall()  # the engine is asynchronous: the work is done when its queues are empty
    barrier(placement)


def to_float(value):
    return float(value.asscalar())


def mean_over_processes(value, placement):
    """The workers' values summed in the kvstore under a key of their own (the servers keep
    the sum of a sync round), over the workers."""
    if placement.processes == 1:
        return value
    import mxnet as mx

    total = mx.nd.array([value], dtype="float64")
    kvstore(placement).pushpull(LOSS_KEY, total, out=total)
    return float(total.asscalar()) / placement.processes


def gpu_allocator_peak(placement):
    """MXNet has no allocator peak; its pool keeps what it took, so the first GPU's memory in
    use is its peak."""
    if placement.device_kind != "gpu":
        return {}
    import mxnet as mx

    free, total = mx.context.gpu_memory_info(contexts(placement)[0].device_id)
    return {"mxnet.context.gpu_memory_info(used)": total - free}


def describe(placement):
    import mxnet as mx

    gpu = placement.device_kind == "gpu"
    features = mx.runtime.Features()
    return {
        "devices_used": {"kind": placement.device_kind, "count": placement.processes * placement.local_devices,
                   "names": [g["name"] for g in gpus()[:placement.local_devices]] if gpu else []},
        "threads": {**placement.handles["thread_variables"], "contexts": placement.local_devices,
                    "processes": placement.processes},
        "build_features": {name: features.is_enabled(name) for name in ("CUDA", "CUDNN", "MKLDNN", "OPENMP")},
        "framework_cpu": {"enabled_features": reported(lambda: sorted(name for name, feature in features.items()
                                                                      if feature.enabled))},
    }


def flushes_denormals():
    """Denormal float32s times one in MXNet's CPU kernel (2**20 of them: its engine and OpenMP threads)."""
    import mxnet as mx

    inputs = mx.nd.array(denormals(), ctx=mx.cpu(), dtype="float32")
    return flushed((inputs * mx.nd.ones_like(inputs)).asnumpy())


def teardown(placement):
    """Stop the loaders' worker processes (the protocol ends with os._exit, which would leave
    them); across nodes, leave the kvstore, which ends the scheduler and servers (launch)."""
    from dlbench.frameworks.mxnet import internals

    for loader in placement.handles["loaders"]:
        internals.stop_workers(loader)
    placement.handles["loaders"].clear()
    sync(placement, None)
    if kvstore(placement) is not None:
        internals.leave_kvstore(placement.handles.pop("kvstore"))


# --- precision: the compute operators of a forward pass --------------------------------------------

def _rnn_flops(data, parameters, out):
    """One layer, one direction: each step's gates (G rows of [i2h | h2h] weights and two biases:
    parameters = G x (inputs + hidden + 2)) times [input, state]."""
    inner = data[-1] + out[-1]
    return 2.0 * np.prod(out[:-1]) * (parameters[0] // (inner + 2)) * inner


def _heads(qkv, attention):
    """The heads of a fused self-attention: its scores' rows (batch x heads) over the batch of its
    queries, keys and values (tokens, batch, 3 x width)."""
    return attention[0] // qkv[1]


# 2 x multiply-adds of an operator, from the shapes of its first input, its second (a weight; RNN: its
# flat parameters; the fused self-attention's weighting: its scores) and its output. The fused
# self-attention (batch x heads scores of tokens x tokens, each over a head's width): the scores
# (query x key) and their weighting of the values, as PyTorch's and JAX's proofs count attention.
_FLOPS = {
    "Convolution": lambda data, weight, out: 2.0 * np.prod(out) * np.prod(weight[1:]),
    "Deconvolution": lambda data, weight, out: 2.0 * np.prod(data) * np.prod(weight[1:]),
    "FullyConnected": lambda data, weight, out: 2.0 * np.prod(out) * weight[1],
    "RNN": _rnn_flops,
    "_contrib_interleaved_matmul_selfatt_qk":
        lambda qkv, out, _: 2.0 * np.prod(out) * (qkv[2] // 3 // _heads(qkv, out)),
    "_contrib_interleaved_matmul_selfatt_valatt":
        lambda qkv, attention, out: 2.0 * np.prod(attention) * (out[2] // _heads(qkv, attention)),
}
# each operator's first input, whose hook call begins its record
_FIRST_INPUT = {"_contrib_interleaved_matmul_selfatt_qk": "queries_keys_values",
                "_contrib_interleaved_matmul_selfatt_valatt": "queries_keys_values"}


def forward_ops(model, inputs, symbol=None):
    """The compute operators (_FLOPS') of one forward pass on `inputs` (an NDArray), as
    dlbench.precision.op each: the dtype of their output (what they computed in: AMP casts
    their operands before them) and their FLOPs from their shapes. symbol (mode hybrid): the
    graph that trains, run on model's Parameters, its operators read by an op hook
    (register_op_hook: each operator's inputs, then outputs; hybridized without static_alloc,
    under which MXNet 1.9 warns that the hook may miss operators); else (mode imperative)
    model's own forward pass, its Gluon layers' inputs and outputs read by forward hooks (the fused
    self-attention is an operator, not a layer: uncounted there; the Transformer runs hybrid, the
    mode the workloads other than MNIST run)."""
    import mxnet as mx
    from mxnet.gluon import nn, rnn

    records = []  # [operator, [(dtype, shape) of its data, weight, ..., output]]
    if symbol is not None:
        def on_array(name, operator, handle):
            operator = mx.base.py_str(operator)
            if operator in _FLOPS:
                if mx.base.py_str(name).endswith("_" + _FIRST_INPUT.get(operator, "data")):  # its record begins
                    records.append((operator, []))
                array = mx.nd.NDArray(ctypes.cast(handle, mx.base.NDArrayHandle), writable=False)
                records[-1][1].append((array.dtype, array.shape))

        data = mx.sym.var("data")
        net = mx.gluon.SymbolBlock(symbol, data, params=model.collect_params())
        net.hybridize()
        net.register_op_hook(on_array, monitor_all=True)
    else:
        kinds = {nn.Dense: "FullyConnected", nn.Conv1D: "Convolution", nn.Conv2D: "Convolution",
                 nn.Conv3D: "Convolution", nn.Conv1DTranspose: "Deconvolution", nn.Conv2DTranspose: "Deconvolution",
                 nn.Conv3DTranspose: "Deconvolution", rnn.LSTM: "RNN", rnn.GRU: "RNN", rnn.RNN: "RNN"}

        def on_layer(block, args, outputs):
            out = outputs[0] if isinstance(outputs, (list, tuple)) else outputs
            weight = ((sum(p.data(out.context).size for p in block.collect_params().values()),)
                      if kinds[type(block)] == "RNN" else block.weight.shape)
            records.append((kinds[type(block)], [(args[0].dtype, args[0].shape), (None, weight), (out.dtype, out.shape)]))

        layers = []
        model.apply(lambda block: layers.append(block) if type(block) in kinds else None)
        hooks = [layer.register_forward_hook(on_layer) for layer in layers]
        net = model
    net(inputs)
    mx.nd.waitall()
    if symbol is None:
        for hook in hooks:
            hook.detach()
    return [op(operator, _dtype_name(arrays[-1][0]), _FLOPS[operator](arrays[0][1], arrays[1][1], arrays[-1][1]))
            for operator, arrays in records]


def _dtype_name(dtype):
    from mxnet.contrib.amp.amp import bfloat16  # MXNet's bfloat16: a numpy record of one uint16

    return "bfloat16" if dtype == bfloat16 else np.dtype(dtype).name


verify_adapter(__name__)  # the contract (dlbench.contract.Adapter), checked as this module loads
