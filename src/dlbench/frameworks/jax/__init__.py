"""JAX's backend: devices, threads, the mesh and the device sync (the contract: dlbench.contract),
and what the JAX workload modules share (the compiled step, batches on the mesh, the grain loader).

Strategies: "single" (one device) and "sharding" (N devices of ONE process: a
jax.sharding.Mesh with one axis, "batch"; each batch is placed with NamedSharding split along
the batch axis, device i taking the i-th contiguous slice as dlbench.contract.shard does; the
model and optimizer state are replicated; the compiled step is the same code, and XLA's
partitioner adds the all-reduce of the gradients). A run is always one process (rank 0).
Batch normalisation under "sharding" normalises over the global batch (XLA partitions the
batch mean like any other reduction), where PyTorch's DDP and TF's MirroredStrategy use each
replica's own batch: the idiom of each framework.

`configure` runs first in the training process, before anything starts JAX's backends
(importing jax does not): it sets the number of CPU devices (jax_num_cpu_devices = devices) and
the run's threads. XLA's CPU client sizes its intra-op thread pool (the "XLAEigen" threads that
run the convolutions and matrix products of every CPU device of the process) from the NPROC
environment variable when it starts, else from the CPU count; NPROC = spec.threads (checked:
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
import bisect
import gc
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

from dlbench.frameworks import reported
from dlbench.numerics import denormals, flushed
from dlbench.clock import Plan
from dlbench.contract import FrameworkError, Placement

STRATEGIES = ("single", "sharding")
BATCH_AXIS = "batch"
_CONFIGURED = {}  # what configure() set, for describe() and for setup() to check


def version():
    return jax.__version__


def configure(spec):
    """The CPU device count and the threads, before JAX starts its backends (idempotent)."""
    from dlbench.frameworks.jax import internals

    wanted = {"NPROC": str(spec.threads), "jax_num_cpu_devices": spec.devices}
    if _CONFIGURED:
        if _CONFIGURED != wanted:
            raise FrameworkError(f"JAX was configured with {_CONFIGURED}, this run wants {wanted}")
        return
    if internals.backends_started():
        raise FrameworkError("JAX's backends started before configure(): the CPU device count and threads "
                             f"{wanted} cannot be set any more")
    os.environ["NPROC"] = wanted["NPROC"]
    jax.config.update("jax_num_cpu_devices", spec.devices)
    _CONFIGURED.update(wanted)


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
    if (spec.strategy == "single") != (spec.devices == 1):
        raise ValueError(f"strategy {spec.strategy} does not run on {spec.devices} device(s): "
                         "single is one device, sharding more than one")


def launch(spec, target, args):
    """Every strategy runs in this one process: the mesh spans its devices."""
    target(0, *args)


def setup(spec, device_kind, rank):
    if rank != 0:
        raise ValueError(f"a JAX run is one process, rank 0, not {rank}")
    configure(spec)
    platform = "gpu" if device_kind == "gpu" else "cpu"
    devices = jax.devices(platform)
    if len(devices) < spec.devices:
        raise FrameworkError(f"{spec.devices} {platform} devices asked for, JAX has {len(devices)}")
    devices = devices[:spec.devices]
    mesh = jax.sharding.Mesh(np.array(devices), (BATCH_AXIS,))
    P = jax.sharding.PartitionSpec
    return Placement(rank=0, processes=1, device_kind=device_kind, local_devices=spec.devices, threads=spec.threads,
                     handles={"devices": devices, "mesh": mesh, "strategy": spec.strategy,
                              "batch": jax.sharding.NamedSharding(mesh, P(BATCH_AXIS)),
                              "replicated": jax.sharding.NamedSharding(mesh, P()),
                              "pending": None, "feeds": []})


def barrier(placement):
    """One process: nothing to wait for."""


def sync(placement, pending):
    """Wait for the device values of the block: `pending` (the sum of the step losses, which
    depends on every step through the state), else the last value a step handed to the backend
    (`hold`). All outputs of one XLA execution become ready together."""
    value = pending if pending is not None else placement.handles["pending"]
    if value is not None:
        jax.block_until_ready(value)


def hold(placement, value):
    """The step's latest device value, for sync to wait on when the protocol passes none."""
    placement.handles["pending"] = value


def to_float(value):
    return float(value)


def mean_over_processes(value, placement):
    return value


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
        "device": {"kind": placement.device_kind, "count": len(devices),
                   "names": [d.device_kind for d in devices] if gpu else []},
        "threads": {"NPROC": os.environ.get("NPROC"), "jax_num_cpu_devices": jax.config.jax_num_cpu_devices,
                    "XLA_FLAGS": os.environ.get("XLA_FLAGS", ""), "processes": 1,
                    "mesh": {BATCH_AXIS: len(devices)}},
        "jaxlib": jaxlib.__version__, "backend_platform": devices[0].platform,
        "platform_version": devices[0].client.platform_version,
        # the JAX libraries of this env (Keras' JAX env has none of them)
        **{name: _installed(name) for name in ("flax", "optax", "grain")},
        "framework_cpu": cpu_kernels(),
    }


def cpu_kernels():
    """What XLA's CPU backend says of itself (its device kind and platform version)."""
    cpu = reported(lambda: jax.devices("cpu")[0])
    return {"device_kind": reported(lambda: cpu.device_kind),
            "platform_version": reported(lambda: cpu.client.platform_version)}


def flushes_denormals():
    """Denormal float32s times one in a jitted XLA computation on the CPU (arguments, not constants
    that the compiler could fold; 2**20 of them)."""
    cpu = jax.devices("cpu")[0]
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
    then wait for grain to unlink that memory."""
    sync(placement, None)
    placement.handles["pending"] = None
    for feed in placement.handles["feeds"]:
        feed.close()
    placement.handles["feeds"].clear()
    _unlink_released_batches()


def _unlink_released_batches():
    """Wait for grain to unlink the shared memory of the batches let go (internals.py says why)."""
    from dlbench.frameworks.jax import internals

    gc.collect()
    internals.wait_for_released_batches()


# --- what the workload modules share -----------------------------------------------------------

def place_batch(placement, arrays):
    """A host batch (a tuple of numpy arrays) on the devices: split along the batch axis over the
    mesh (device i takes the i-th contiguous slice), or on the one device."""
    return jax.device_put(arrays, placement.handles["batch"])


def make_adam(spec, learning_rate):
    """optax.adam with the spec's fields; the learning rate a hyperparameter in the optimizer
    state (optax.inject_hyperparams), so that a schedule sets it at any step without a new trace."""
    import optax

    opt = spec.optimizer
    return optax.inject_hyperparams(optax.adam)(learning_rate=learning_rate, b1=opt.beta1, b2=opt.beta2,
                                                eps=opt.eps)


def parameters(model):
    """Trainable parameters (nnx.Param) of a Flax NNX model."""
    from flax import nnx

    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nnx.state(model, nnx.Param)))


class Training:
    """The model and its optimizer as one pure state (nnx.split), replicated over the mesh, and
    the jit-compiled step that updates it: loss_fn(model outputs, labels) -> the batch's mean loss."""

    def __init__(self, placement, model, tx, loss_fn):
        from flax import nnx

        self.placement = placement
        optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
        self.graphdef, state = nnx.split((model, optimizer))
        self.state = jax.device_put(state, placement.handles["replicated"])
        graphdef = self.graphdef

        def step(state, inputs, labels):
            model, optimizer = nnx.merge(graphdef, state)

            def loss_of(model):
                return loss_fn(model(inputs), labels)

            loss, grads = nnx.value_and_grad(loss_of)(model)
            optimizer.update(model, grads)
            return nnx.state((model, optimizer)), loss

        self.step = jax.jit(step, donate_argnums=0)

    def __call__(self, inputs, labels):
        self.state, loss = self.step(self.state, inputs, labels)
        hold(self.placement, loss)
        return loss

    def model_state(self):
        return self.state[0]

    def set_learning_rate(self, learning_rate):
        hyper = self.state[1]["opt_state"]["hyperparams"]["learning_rate"]
        hyper.set_value(jax.device_put(np.asarray(learning_rate, dtype=hyper.get_value().dtype),
                                       self.placement.handles["replicated"]))


class ModelMethods:
    """What every JAX workload module does the same way with its self.model (a Flax NNX module,
    channels last) and, once build_training has made it, self.training (`Training`):
    predictions in inference mode (batch norm with its running statistics), the parameter count,
    and loading PyTorch's state dict (`torch_to_flax`).

    Subclasses set input_dtype and may override to_model_layout(inputs) (e.g. NCHW -> NHWC)."""

    input_dtype = "float32"
    training = None

    def to_model_layout(self, inputs):
        return inputs

    def _inference(self):
        from flax import nnx

        if getattr(self, "_infer", None) is None:
            graphdef = nnx.graphdef(nnx.view(self.model, use_running_average=True, raise_if_not_found=False))

            def infer(state, inputs):
                return nnx.merge(graphdef, state)(inputs)

            self._infer = jax.jit(infer)
        return self._infer

    def predict(self, inputs):
        from flax import nnx

        inputs = np.ascontiguousarray(self.to_model_layout(inputs.astype(self.input_dtype, copy=False)))
        handles = self.placement.handles
        state = self.training.model_state() if self.training is not None else nnx.state(self.model)
        # Split over the mesh where the batch divides evenly, else every device reads it all.
        sharding = handles["batch"] if len(inputs) % len(handles["devices"]) == 0 else handles["replicated"]
        if self.training is None:
            state = jax.device_put(state, handles["replicated"])
        return np.asarray(self._inference()(state, jax.device_put(inputs, sharding)))

    def parameter_count(self):
        return parameters(self.model)

    def load_weights(self, weights):
        """Before build_training (the parity test builds the model only)."""
        if self.training is not None:
            raise RuntimeError("load_weights before build_training: the training state is a copy of the model")
        torch_to_flax(self.model, self.torch_weights(weights))

    def torch_weights(self, weights):
        """PyTorch's state dict with the workload's own renames and layout changes (the generic
        conversion of torch_to_flax takes the rest)."""
        return weights


def torch_to_flax(model, weights, keep=()):
    """Load PyTorch's state dict into a Flax NNX model whose module paths are PyTorch's
    ('features.denseblock1.denselayer1.conv1' is model.features.denseblock1.denselayer1.conv1,
    '3' of an nn.Sequential is nnx.Sequential's layers[3]): Conv OIHW -> HWIO, Linear (out, in)
    -> (in, out), BatchNorm weight, bias, running mean and variance as scale, bias, mean, var,
    Embedding as is; num_batches_tracked has no counterpart. Every parameter and statistic of
    the model must be given, and every array used, but those whose names start with a prefix in
    `keep`, which keep their values (e.g. a classifier of another size)."""
    from flax import nnx

    targets = {}  # PyTorch name -> (variable, array in Flax's layout)
    for path, module in nnx.iter_modules(model):
        prefix = ".".join(str(p) for p in path if p != "layers")
        name = (prefix + ".") if prefix else ""
        if isinstance(module, nnx.Conv):
            targets[name + "weight"] = (module.kernel, lambda w: w.transpose(2, 3, 1, 0))
            if module.bias is not None:
                targets[name + "bias"] = (module.bias, None)
        elif isinstance(module, nnx.Linear):
            targets[name + "weight"] = (module.kernel, lambda w: w.T)
            if module.bias is not None:
                targets[name + "bias"] = (module.bias, None)
        elif isinstance(module, nnx.BatchNorm):
            for torch_kind, variable in (("weight", module.scale), ("bias", module.bias),
                                         ("running_mean", module.mean), ("running_var", module.var)):
                targets[name + torch_kind] = (variable, None)
        elif isinstance(module, nnx.Embed):
            targets[name + "weight"] = (module.embedding, None)
    targets = {k: v for k, v in targets.items() if not k.startswith(tuple(keep))}
    given = {k: v for k, v in weights.items()
             if not k.endswith(".num_batches_tracked") and not k.startswith(tuple(keep))}
    missing, unused = sorted(set(targets) - set(given)), sorted(set(given) - set(targets))
    if missing or unused:
        raise ValueError(f"PyTorch's state dict does not match the Flax model: missing {missing[:5]} "
                         f"({len(missing)}), unused {unused[:5]} ({len(unused)})")
    for name, (variable, convert) in targets.items():
        value = np.asarray(given[name], dtype=np.float32)
        value = convert(value) if convert else value
        if value.shape != variable.get_value().shape:
            raise ValueError(f"{name}: shape {value.shape} in Flax's layout, the model's {variable.get_value().shape}")
        variable.set_value(jax.numpy.asarray(value))


# --- loading: grain ----------------------------------------------------------------------------

class HostArrays:
    """Numpy arrays for a loader to gather from. In the training process they are the arrays
    themselves; pickled for grain's spawned workers they travel as files in the loader's folder,
    memory-mapped there (the page cache shares them, as fork shares the arrays of PyTorch's and
    MXNet's workers)."""

    def __init__(self, arrays, folder=None):
        self.arrays, self.paths = tuple(arrays), None
        if folder is not None:
            self.paths = []
            for i, array in enumerate(self.arrays):
                path = Path(folder) / f"array-{i}.npy"
                np.save(path, array)
                self.paths.append(str(path))

    def __getstate__(self):
        if self.paths is None:
            return {"arrays": self.arrays, "paths": None}
        return {"arrays": None, "paths": self.paths}

    def __setstate__(self, state):
        self.paths = state["paths"]
        self.arrays = state["arrays"]
        if self.arrays is None:
            self.arrays = tuple(np.load(path, mmap_mode="r") for path in self.paths)

    def gather(self, indices):
        return tuple(np.ascontiguousarray(array[indices]) for array in self.arrays)


class GatherBatch:
    """An element loader over the payload (order,): element i = each array gathered at the
    order's row i (a whole index batch in one vectorised gather)."""

    def __init__(self, arrays):
        self.arrays = arrays

    def __call__(self, payload, position):
        order, = payload
        return self.arrays.gather(order[position])


# Reading in the consuming thread: no threads, no prefetch.
IN_THREAD = dict(num_threads=0, prefetch_buffer_size=0)


class _GatedSource:
    """grain's random-access source over every round of a Feed: element k is (round r,
    position); a round's elements wait until its payload file is published. Round 0 is the
    warm-up: one empty element per worker, consumed when the feed starts, so that every worker
    process has started (and imported its modules) before the run."""

    POLL_S = 0.001

    def __init__(self, folder, sizes, load, warmup):
        self.folder, self.load, self.parent = folder, load, os.getpid()
        self.starts = np.cumsum([0, warmup, *sizes]).tolist()
        self.cache = {}

    def __len__(self):
        return self.starts[-1]

    def _payload(self, r):
        if r not in self.cache:
            path = os.path.join(self.folder, f"round-{r}.npz")
            while not os.path.exists(path):
                if os.path.exists(os.path.join(self.folder, "closed")):
                    raise RuntimeError("the loader was closed")
                if os.getppid() != self.parent:  # the training process is gone
                    os._exit(1)
                time.sleep(self.POLL_S)
            with np.load(path) as arrays:  # one round at a time
                self.cache = {r: tuple(arrays[f"arr_{i}"] for i in range(len(arrays.files)))}
        return self.cache[r]

    def __getitem__(self, k):
        r = bisect.bisect_right(self.starts, k) - 1
        if r == 0:
            return np.zeros(0, np.int8)
        return self.load(self._payload(r), k - self.starts[r])


class Feed:
    """A grain loader fed one round at a time: the run's order (the training Feed's one round,
    see `feed_order`), one evaluation's images (a round each).

    sizes: the number of elements of each round, in the order the rounds are read.
    load(payload, position) -> element (numpy arrays), a picklable callable (it runs in the
    workers): payload is the tuple of numpy arrays given to `round` (the order and each step's
    epoch, the paths of a split).

    workers = 0: each round is grain.MapDataset.range(n).map(...) read in the consuming thread
    (IN_THREAD: no threads, no prefetch).
    workers > 0: one pipeline over every round, grain.MapDataset.source(...).to_iter_dataset()
    .mp_prefetch(`workers` processes); worker i loads elements i, i + workers, ... and grain
    interleaves them back in order. The workers start in `start`; each waits for a round's
    payload (a file in the feed's folder), which `round` publishes at the round's first next():
    nothing of a round loads before it is read. From then on a worker runs at most 4 elements
    ahead of what was read (grain's default and smallest buffers: one in its hands, one in its
    queue, two in this process's interleave thread for it).
    A round's unread elements come before the next round's (the pipeline is one sequence):
    a round may be left unread only if it is the Feed's last, as the training order is.
    """

    def __init__(self, placement, sizes, workers, name="feed"):
        try:
            import grain  # noqa: F401
        except ImportError as err:
            raise FrameworkError(f"the JAX loaders are grain's, which this environment lacks ({err})") from err
        self.sizes, self.workers, self.next_round, self.unread = list(sizes), workers, 0, 0
        # The workers' files: shared arrays, each round's payload (nothing with 0 workers).
        self.folder = tempfile.mkdtemp(prefix=f"dlbench-jax-{name}-") if workers > 0 else None
        self.load = self.iterator = None
        placement.handles["feeds"].append(self)

    def start(self, load):
        """Start the workers (workers > 0), each once its first element is asked for: the
        warm-up round, read here."""
        import grain
        from absl import flags

        self.load = load
        if self.workers == 0:
            return self
        if not flags.FLAGS.is_parsed():  # grain's workers read its absl flags; no absl.app here
            flags.FLAGS.mark_as_parsed()
        source = _GatedSource(self.folder, self.sizes, load, warmup=self.workers)
        dataset = (grain.MapDataset.source(source)
                   .to_iter_dataset(grain.ReadOptions(**IN_THREAD))
                   .mp_prefetch(grain.MultiprocessingOptions(num_workers=self.workers)))
        self.iterator = iter(dataset)
        for _ in range(self.workers):
            next(self.iterator)
        for path in Path(self.folder).glob("array-*.npy"):  # every worker has mapped them: the
            path.unlink()  # pages live as long as the maps, and a crash leaves no copy behind
        return self

    def arrays(self, arrays):
        """HostArrays for load callables: shared through the folder when there are workers."""
        return HostArrays(arrays, self.folder if self.workers > 0 else None)

    def round(self, *payload):
        """An iterator over the next round's elements, load(payload, 0), load(payload, 1), ...;
        the round opens at its first next()."""
        import grain

        r = self.next_round
        if r >= len(self.sizes):
            raise RuntimeError(f"a round asked of a loader of {len(self.sizes)} rounds, all given")
        if self.unread:
            raise RuntimeError(f"round {r} asked of a loader whose round {r - 1} has {self.unread} elements unread")
        self.next_round += 1
        n = self.sizes[r]
        self.unread += n
        if self.workers > 0:
            staged = os.path.join(self.folder, f"staged-{r + 1}.npz")
            np.savez(staged, *payload)  # written now, outside the clock; published at the first next()

        def elements():
            if self.workers == 0:
                load = self.load
                source = iter(grain.MapDataset.range(n).map(lambda i: load(payload, i))
                              .to_iter_dataset(grain.ReadOptions(**IN_THREAD)))
            else:
                os.replace(staged, os.path.join(self.folder, f"round-{r + 1}.npz"))
                source = self.iterator
            for _ in range(n):
                element = next(source)
                self.unread -= 1
                yield element

        return elements()

    @property
    def rounds_left(self):
        return self.sizes[self.next_round:]

    def close(self):
        if self.folder is None:
            return
        Path(self.folder, "closed").touch()  # waiting workers stop waiting
        if self.iterator is not None:
            self.iterator.close()
            self.iterator = None
            gc.collect()  # the pipeline's queues and events: their semaphores are unlinked now, not
            # left to multiprocessing's resource tracker by the protocol's os._exit
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder = None


def order_feed(placement, spec, name):
    """The training loader: a Feed of ONE round, the run's order, Plan.max_steps batches long
    (dlbench.clock.run_order), of which the run reads as many as its blocks take."""
    return Feed(placement, [Plan.max_steps(spec.measure, spec.convergence)], spec.workers, name)


def feed_order(placement, feed, order, *per_step):
    """The device batches of the run's order through an `order_feed` (its one round): payload
    (order, *per_step), e.g. each step's epoch."""
    if feed.rounds_left != [len(order)]:
        raise RuntimeError(f"the training loader has rounds {feed.rounds_left} left, "
                           f"the run's order {len(order)} steps")
    return (place_batch(placement, batch) for batch in feed.round(order, *per_step))
