"""The JAX adapter: devices, threads, the mesh and the device sync (the contract: dlbench.contract).
What the JAX workload modules share is beside it: the compiled step, batches on the mesh and
predictions (step.py), the grain loader (loaders.py), the parity weight conversion
(torch_weights.py), the uses of JAX's and grain's private API (internals.py).

Strategies: "none" (one device) and "sharding" (N devices of one process a node: a
jax.sharding.Mesh with one axis, "batch"; each batch is placed with NamedSharding split along
the batch axis, device i taking the i-th contiguous slice as dlbench.contract.shard does; the
model and optimizer state are replicated; the compiled step is the same code, and XLA's
partitioner adds the all-reduce of the gradients). On one node a run is one process (rank 0).
Across nodes (dlbench.nodes) it is one process per node, joined by jax.distributed.initialize
(node 0's address is the coordinator; cross-process collectives on the CPU over gloo): the
mesh spans every process's devices, process p feeding the p-th contiguous slice of each global
batch (Placement.local, jax.make_array_from_process_local_data), so that the global batch and
the computation are those of one process with all the devices; process 0 evaluates alone, on
its own replica of the state (`local_replica`). Batch normalisation under "sharding"
normalises over the global batch (XLA partitions the batch mean like any other reduction),
where PyTorch's DDP and TF's MirroredStrategy use each replica's own batch: the idiom of each
framework.

`configure` runs first in the training process, before anything starts JAX's backends
(importing jax does not): it sets the number of CPU devices (jax_num_cpu_devices = the
node's devices) and the node's threads, then joins the other nodes' processes. XLA's CPU client
sizes its intra-op thread pool (the "XLAEigen" threads that run the convolutions and matrix
products of every CPU device of the process) from the NPROC environment variable when it
starts, else from the CPU count; NPROC = the node's threads (spec.threads on one node; checked:
NPROC=1, 2, 4 give 1, 2, 4 such threads; XLA_FLAGS=--xla_cpu_multi_thread_eigen=false does not
shrink the pool in jaxlib 0.10.2, so XLA_FLAGS is left as the user set it, and recorded).

The step: jax.jit over the pure state of the model and its optax optimizer (nnx.split once;
nnx.merge inside the traced function), the state donated and returned, the loss returned as a
device array (nothing is read per step). Measured against nnx.jit on the modules (MNIST small,
1 CPU device, a busy 2-core machine, 40 steps): at batch 64 the two are within the machine's
noise (2.35 against 2.53 s in one sample, 3.4-3.9 against 3.5-3.7 s in another); per call,
nnx.jit costs about 1 ms more (it traverses the module graph each time: 2.9 against 1.9 ms a
step at batch 2). The Flax guide's "performance considerations" recommend this form for hot
loops.

Loading (`Feed`): grain, the JAX ecosystem's loader, fed rounds of work in order. Training is
ONE round, the run's order (`feed_order`: every epoch back to back, as many batches as the run
could take, read only as far as the run goes); an evaluation is a round of a Feed of its own, so
that it is never queued behind the training order's unread batches. workers = 0: a round is a
grain MapDataset read in the consuming thread (no threads, no prefetch). workers > 0: one grain
pipeline per Feed (mp_prefetch, `workers` spawned worker processes, started in build and kept for
the run, as the other frameworks' loaders keep theirs); a worker loads a round's elements only
once its iteration has begun (the training order: inside the first block's clock), then stays
within grain's buffers ahead of what was read (`Feed`), so nothing is loaded ahead outside the
clock.
"""
import gc
import os
import subprocess
import sys

import jax
import numpy as np
from jax.experimental import multihost_utils

from dlbench.frameworks import reported
from dlbench.nodes import devices_per_node, this_node
from dlbench.numerics import CUDNN_AUTOTUNE, denormals, flushed, xla_flags_with_autotune
from dlbench.contract import Placement, verify_adapter
from dlbench.errors import FrameworkError
from dlbench.frameworks.jax.hlo import forward_ops  # noqa: F401 (the precision proof: Keras on JAX uses it too)

STRATEGIES = ("none", "sharding")
BATCH_AXIS = "batch"
_CONFIGURED = {}  # what configure() set, for describe() and for setup() to check


def version():
    return jax.__version__


def configure(spec, join=True):
    """The CPU device count and the threads of this node's process, before JAX starts its
    backends (idempotent); in a run of several nodes, then `join` the other nodes' processes
    (join=False: the caller joins them itself, as Keras does through keras.distribution)."""
    from dlbench.frameworks.jax import internals

    node = this_node(spec)
    wanted = {"NPROC": str(node.threads), "jax_num_cpu_devices": devices_per_node(spec), "nodes": spec.nodes}
    if _CONFIGURED:
        if _CONFIGURED != wanted:
            raise FrameworkError(f"JAX was configured with {_CONFIGURED}, this run wants {wanted}")
        return
    if internals.xla_started():
        raise FrameworkError("JAX's backends started before configure(): the CPU device count and threads "
                             f"{wanted} cannot be set any more")
    os.environ["NPROC"] = wanted["NPROC"]
    cudnn_autotune(CUDNN_AUTOTUNE)  # here too: a run of several nodes may start XLA when it joins (below)
    # on a GPU, allocate as the run needs rather than 75% of it up front: its peak memory is then its own
    os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    jax.config.update("jax_num_cpu_devices", wanted["jax_num_cpu_devices"])
    if spec.nodes > 1:
        # XLA's CPU client runs cross-process collectives with these (gloo: JAX 0.10.2's default, said here)
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        if join:
            jax.distributed.initialize(**join_arguments(spec, node),
                                       shutdown_timeout_seconds=int(spec.timeout_s))
    _CONFIGURED.update(wanted)


def cudnn_autotune(on):
    """XLA's GPU autotuning level (on, 4, as XLA ships), in XLA_FLAGS, which XLA reads when its
    backends start: a change after that is refused."""
    from dlbench.frameworks.jax import internals

    flags = xla_flags_with_autotune(os.environ.get("XLA_FLAGS", ""), on)
    if flags != os.environ.get("XLA_FLAGS") and internals.xla_started():
        raise FrameworkError(f"JAX's backends started before cudnn_autotune(): XLA_FLAGS {flags!r} cannot be set any more")
    os.environ["XLA_FLAGS"] = flags
    return {"XLA_FLAGS": flags}


def gpu_float32(policy):
    """The precision of XLA's float32 dots and convolutions: highest (float32) or tensorfloat32
    (JAX ships with neither set: XLA's default, which allows TF32 on GPUs)."""
    jax.config.update("jax_default_matmul_precision", {"highest": "highest", "tf32": "tensorfloat32"}[policy])
    return {"jax_default_matmul_precision": jax.config.jax_default_matmul_precision}


def compile_cache(directory):
    """XLA's persistent compilation cache, every program kept (JAX keeps only those that took
    over a second to compile, as it ships; the eval step's too here)."""
    jax.config.update("jax_compilation_cache_dir", str(directory))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return {name: getattr(jax.config, name) for name in (
        "jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
        "jax_persistent_cache_min_entry_size_bytes")}


def float32_product(a, b, placement):
    device = jax.local_devices(backend=placement.device_kind)[0]  # this process's: a run's mesh spans others'
    return np.asarray(jax.jit(jax.numpy.matmul)(jax.device_put(a, device), jax.device_put(b, device)))


def join_arguments(spec, node):
    """Where this node's process meets the others: node 0's address and the run's base port
    (the coordinator), this process's place, its devices (on GPUs: the node's first ones)."""
    return dict(coordinator_address=f"{node.address}:{node.port}", num_processes=node.nodes,
                process_id=node.rank, local_device_ids=list(range(devices_per_node(spec))))


def visible_gpus():
    """GPUs this jaxlib can use (0 with the CPU build). Once configure() has run, JAX's
    backends may start; before, a child process answers, so that the CPU device count and the
    threads can still be set in this one."""
    if _CONFIGURED:
        try:
            return len(jax.devices("gpu"))
        except RuntimeError:  # no GPU platform in this jaxlib
            return 0
    code = "import jax\ntry:\n    print(len(jax.devices('gpu')))\nexcept RuntimeError:\n    print(0)"
    out = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True)
    if out.returncode != 0:
        last = out.stderr.strip().splitlines()[-1:] or ["no error output"]
        raise FrameworkError(f"jax cannot be imported to count its GPUs: {last[0]}")
    return int(out.stdout.split()[-1])


def check(spec, device_kind):
    if spec.strategy not in STRATEGIES:
        raise ValueError(f"unknown JAX strategy {spec.strategy!r}, expected one of {STRATEGIES}")
    if (spec.strategy == "none") != (spec.devices == 1):
        raise ValueError(f"strategy {spec.strategy} does not run on {spec.devices} device(s): "
                         "single is one device, sharding more than one")


def launch(spec, target, args):
    """Every strategy runs in this one process (one a node): the mesh spans its devices and
    every other node's."""
    target(0, *args)


def setup(spec, device_kind, rank):
    """The mesh over the run's devices: this process's, or every node's process's in process
    order (process p's devices hold the p-th slice of the batch axis, as Placement.local says)."""
    if rank != 0:
        raise ValueError(f"a JAX run is one process per node, local rank 0, not {rank}")
    configure(spec)
    platform = "gpu" if device_kind == "gpu" else "cpu"
    devices = sorted(jax.devices(platform), key=lambda d: d.process_index)  # stable: each process's in its order
    if len(devices) < spec.devices:
        raise FrameworkError(f"{spec.devices} {platform} devices asked for, JAX has {len(devices)}")
    devices = devices[:spec.devices]
    local = [d for d in devices if d.process_index == jax.process_index()]
    mesh = jax.sharding.Mesh(np.array(devices), (BATCH_AXIS,))
    local_mesh = mesh if len(local) == len(devices) else jax.sharding.Mesh(np.array(local), (BATCH_AXIS,))
    P = jax.sharding.PartitionSpec
    return Placement(rank=jax.process_index(), processes=jax.process_count(), device_kind=device_kind,
                     local_devices=len(local), threads=this_node(spec).threads,
                     handles={"devices": devices, "mesh": mesh, "strategy": spec.strategy,
                              "batch": jax.sharding.NamedSharding(mesh, P(BATCH_AXIS)),
                              "replicated": jax.sharding.NamedSharding(mesh, P()),
                              # this process's devices alone: what it computes without the others
                              "local_batch": jax.sharding.NamedSharding(local_mesh, P(BATCH_AXIS)),
                              "local_replicated": jax.sharding.NamedSharding(local_mesh, P()),
                              "pending": None, "feeds": []})


def local_replica(tree, placement):
    """This process's replica of replicated arrays, as arrays of its own devices alone
    ("local_replicated"): what process 0 evaluates with while the others wait, with no
    collective they are not in. One process: the arrays as they are."""
    if placement.processes == 1:
        return tree
    sharding = placement.handles["local_replicated"]
    return jax.tree.map(lambda x: jax.make_array_from_single_device_arrays(
        x.shape, sharding, [shard.data for shard in x.addressable_shards]), tree)


def barrier(placement):
    """Every process reaches this point (a collective over every device: JAX's
    sync_global_devices); one process: nothing to wait for."""
    if placement.processes > 1:
        multihost_utils.sync_global_devices("dlbench barrier")


def sync(placement, pending):
    """Wait for the device values of the block: `pending` (the sum of the step losses, which
    depends on every step through the state), else the last value a step handed to the adapter
    (`hold`). All outputs of one XLA execution become ready together. Then, across nodes, wait
    for the other processes (`barrier`)."""
    value = pending if pending is not None else placement.handles["pending"]
    if value is not None:
        jax.block_until_ready(value)
    barrier(placement)


def hold(placement, value):
    """The step's latest device value, for sync to wait on when the protocol passes none."""
    placement.handles["pending"] = value


def to_float(value):
    return float(value)


def mean_over_processes(value, placement):
    if placement.processes == 1:
        return value
    # float32: JAX's 64-bit types are off (a step's loss is float32 already)
    return float(np.mean(multihost_utils.process_allgather(np.float32(value))))


def gpu_allocator_peak(placement):
    if placement.device_kind != "gpu":
        return {}
    stats = placement.handles["devices"][0].memory_stats() or {}
    return {"jax.Device.memory_stats()[peak_bytes_in_use]": stats["peak_bytes_in_use"]} if stats else {}


def describe(placement):
    import jaxlib

    devices = placement.handles["devices"]
    gpu = placement.device_kind == "gpu"
    return {
        "devices_used": {"kind": placement.device_kind, "count": len(devices),
                   "names": [d.device_kind for d in devices] if gpu else []},
        "threads": {"NPROC": os.environ.get("NPROC"), "jax_num_cpu_devices": jax.config.jax_num_cpu_devices,
                    "XLA_FLAGS": os.environ.get("XLA_FLAGS", ""), "processes": placement.processes,
                    "mesh": {BATCH_AXIS: len(devices)}},
        "jaxlib": jaxlib.__version__, "backend_platform": devices[0].platform,
        "platform_version": devices[0].client.platform_version,
        # the JAX libraries of this env (Keras' JAX env has none of them)
        **{name: _installed(name) for name in ("flax", "optax", "grain")},
        "framework_cpu": cpu_kernels(),
    }


def cpu_kernels():
    """What XLA's CPU platform says of itself (its device kind and platform version)."""
    cpu = reported(lambda: jax.devices("cpu")[0])
    return {"device_kind": reported(lambda: cpu.device_kind),
            "platform_version": reported(lambda: cpu.client.platform_version)}


def flushes_denormals():
    """Denormal float32s times one in a jitted XLA computation on the CPU (arguments, not constants
    that the compiler could fold; 2**20 of them)."""
    cpu = jax.local_devices(backend="cpu")[0]
    inputs = jax.device_put(denormals(), cpu)
    ones = jax.device_put(np.ones(inputs.shape, np.float32), cpu)
    return flushed(jax.jit(jax.numpy.multiply)(inputs, ones))


def _installed(distribution):
    from importlib.metadata import PackageNotFoundError, version as package_version

    try:
        return package_version(distribution)
    except PackageNotFoundError:
        return None


def teardown(placement):
    """Stop the loaders' worker processes (the protocol ends with os._exit, which would leave
    them), after the last values are done and let go (a loader's batches live in shared memory);
    then wait for grain to unlink that memory. Across nodes, leave jax.distributed (its shutdown
    waits for every process: none leaves while process 0 still reports; os._exit skips JAX's
    atexit shutdown)."""
    sync(placement, None)
    placement.handles["pending"] = None
    for feed in placement.handles["feeds"]:
        feed.close()
    placement.handles["feeds"].clear()
    from dlbench.frameworks.jax import internals

    gc.collect()  # the batches let go are unlinked by grain's thread (internals.py says why)
    internals.wait_for_released_batches()
    if placement.processes > 1:
        jax.distributed.shutdown()


verify_adapter(__name__)  # the contract (dlbench.contract.Adapter), checked as this module loads
