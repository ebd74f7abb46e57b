"""MXNet's backend: contexts, threads and the engine sync (the contract: dlbench.contract).
What the MXNet workload modules share is beside it: the Trainer and the data-parallel step
(step.py), Gluon's DataLoader (loaders.py), the uses of MXNet's private API (internals.py).

Strategies: "single" (one context) and "kvstore" (data parallel over N contexts of ONE
process: each context runs forward and backward on its contiguous slice of the batch, and the
Gluon Trainer sums the N gradients in a KVStore, 'device' on GPUs and 'local' on the CPU, and
applies one update, the same on every context). A run is always one process (rank 0).

mxnet is imported only once `setup` has set the thread variables: its thread pools read
OMP_NUM_THREADS and MXNET_CPU_WORKER_NTHREADS once, when the library loads. Nothing here or
in the workload modules imports it at module level (the protocol imports both before setup).
"""
import os
import subprocess
import sys

from dlbench.frameworks import FRAMEWORKS, reported
from dlbench.numerics import denormals, flushed
from dlbench.contract import FrameworkError, Placement
from dlbench.record import gpus

STRATEGIES = ("single", *FRAMEWORKS["mxnet"].strategies)


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
    if spec.strategy == "single" and spec.devices != 1:
        raise ValueError(f"strategy single runs on one device, not {spec.devices}")


def launch(spec, target, args):
    """Every strategy runs in this one process: its contexts are its devices."""
    target(0, *args)


def thread_variables(total_threads, contexts):
    """The engine runs each context's operators on a worker pool of its own, each operator
    with OMP_NUM_THREADS threads: N CPU contexts share the run's threads, as PyTorch's DDP
    processes do."""
    return {"OMP_NUM_THREADS": max(1, total_threads // contexts), "MXNET_CPU_WORKER_NTHREADS": 1}


def setup(spec, device_kind, rank):
    if rank != 0:
        raise ValueError(f"an MXNet run is one process, rank 0, not {rank}")
    threads = thread_variables(spec.threads, spec.devices)
    wanted = {name: str(value) for name, value in threads.items()}
    if "mxnet" in sys.modules and any(os.environ.get(k) != v for k, v in wanted.items()):
        raise FrameworkError("mxnet was imported before its thread variables were set; "
                             f"it would not use {wanted}")
    os.environ.update(wanted)
    import mxnet as mx

    contexts = [mx.gpu(i) if device_kind == "gpu" else mx.cpu(i) for i in range(spec.devices)]
    return Placement(rank=0, processes=1, device_kind=device_kind, local_devices=spec.devices,
                     threads=spec.threads,
                     handles={"contexts": contexts, "strategy": spec.strategy, "thread_variables": threads,
                              "loaders": []})


def contexts(placement):
    """The run's contexts, one per device; the first one evaluates."""
    return placement.handles["contexts"]


# --- the protocol's calls ---------------------------------------------------------------------

def barrier(placement):
    """One process: nothing to wait for."""


def sync(placement, pending):
    import mxnet as mx

    mx.nd.waitall()  # the engine is asynchronous: the work is done when its queues are empty


def to_float(value):
    return float(value.asscalar())


def mean_over_processes(value, placement):
    return value


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
        "device": {"kind": placement.device_kind, "count": placement.local_devices,
                   "names": [g["name"] for g in gpus()[:placement.local_devices]] if gpu else []},
        "threads": {**placement.handles["thread_variables"], "contexts": placement.local_devices},
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
    """Stop the loaders' worker processes (the protocol ends with os._exit, which would leave them)."""
    from dlbench.frameworks.mxnet import internals

    for loader in placement.handles["loaders"]:
        internals.stop_workers(loader)
    placement.handles["loaders"].clear()
    sync(placement, None)
