"""The contract between the protocol and a framework: what an adapter module and a workload's
framework part implement, and where a process computes (Placement); the two ways a point can
refuse to run are dlbench.errors' NotApplicable and FrameworkError. The protocol
(dlbench.protocol) calls these; it is not imported here, so a framework module imports this file
and the clock (dlbench.clock), never the protocol.

A framework adapter is a module with these functions (see dlbench/frameworks/pytorch/__init__.py):
    configure(spec)                      (optional) process-wide settings that must precede the
                                         framework's start (JAX's CPU device count), called first
    version() -> str                     the framework's version
    visible_gpus() -> int                GPUs this build of the framework can use
    check(spec, device_kind)             raise NotApplicable for a point without meaning here
    launch(spec, target, args)           run target(rank, *args) in each process of the run
    setup(spec, device_kind, rank) -> Placement
    barrier(placement)                   every process of the run reaches this point
    sync(placement, pending)             the device's queued work is done, in every process;
                                         pending: the block's last device value (the loss sum)
    to_float(value) -> float             a device scalar on the host
    mean_over_processes(x, placement) -> float
    gpu_allocator_peak(placement) -> {measure: bytes} or {}   the allocator's own peak
    describe(placement) -> dict          device names and thread settings, for the record; under
                                         framework_cpu, what the framework says it uses on the CPU
    flushes_denormals() -> bool          a denormal times one, in the framework's own ops and
                                         threads, comes out zero (dlbench.numerics)
    cudnn_autotune(on) -> dict           cuDNN's autotuning on or off in the framework's own terms,
                                         before it starts (idempotent); returns what it set
                                         ({flag or variable: value}, dlbench.numerics.CUDNN_AUTOTUNE)
    gpu_float32(policy) -> dict          float32 products on GPUs in full float32 or TF32, in the
                                         framework's own terms, before it starts (idempotent);
                                         returns what it reads back (dlbench.numerics)
    compile_cache(directory) -> dict     the framework's persistent cache of compiled programs in
                                         that folder, before it compiles anything; returns what it
                                         set ({} where the framework compiles nothing it can keep)
    float32_product(a, b, placement)     a @ b of float32 numpy arrays, computed by the framework
                                         on the run's device, as numpy
    teardown(placement)
"""
from dataclasses import dataclass, field

import numpy as np

from dlbench import precision
from dlbench.files import file_sha256
from dlbench.weights import initial_weights, weights_sha256


def shard(batch, part, parts):
    """Part `part` of `parts` contiguous, equal slices of a batch (a device's share)."""
    size = len(batch) // parts
    return batch[part * size: (part + 1) * size]


def one_ahead(items):
    """The items, each handed on only once the next has been made: where making an item queues
    its copy to a device (asynchronous in every framework), that copy runs while the step of the
    item before computes (the input idiom of the GPU paths: NVIDIA Apex's data_prefetcher, Keras'
    one-batch-ahead iterator)."""
    ahead = None
    for item in items:
        if ahead is not None:
            yield ahead
        ahead = item
    if ahead is not None:
        yield ahead


@dataclass
class Placement:
    """Where one process of a run computes."""
    rank: int                # this process, 0..processes-1; rank 0 evaluates and reports
    processes: int           # processes of the run (DistributedDataParallel ranks, TF workers)
    device_kind: str         # cpu or gpu
    local_devices: int       # devices (replicas) this process drives
    threads: int             # CPU threads of this process
    handles: dict = field(default_factory=dict)  # the framework's own objects (device, strategy, contexts)

    def local(self, order):
        """This process's contiguous slice of every global batch: (n_batches, local batch)."""
        return np.stack([shard(batch, self.rank, self.processes) for batch in order])


class Workload:
    """A workload in one framework: the task's shared part (a subclass per workload in
    dlbench/workloads/<workload>/task.py: data, metrics) and the framework's part (a
    subclass of that in dlbench/workloads/<workload>/<framework>.py, named WORKLOAD there).

    `build` runs outside the clock: the task's load_data(), then the framework's
    build_model() and build_training().

    The framework's part implements:
        build_model()              self.model, initialised from the seed
        build_training()           optimizer, loaders (and their worker pools), wrappers
        batches(order, epochs)     ONE iterable of this process's device batches of `order`
                                   (the run's index batches, every epoch back to back) and
                                   `epochs` (each step's epoch: augmentation draws from it);
                                   made once, iterated across every block of the run
        train_step(batch)          one step; returns the loss on the device (None: no loss)
        set_learning_rate(lr)      (where the task's epoch_info gives one) from the next step on
        predict(inputs)            numpy inputs -> numpy outputs, in inference mode
        parameter_count()          trainable parameters of self.model
        load_weights(weights)      {name: numpy array} in PyTorch's names and layouts, the
                                   conversion this framework needs (the parity test)
    and may implement the classmethod check(spec, device_kind), which raises NotApplicable
    for a point without meaning in this framework.

    Precision (dlbench.precision; a run set with precisions): the model trains, and predicts, in
    `self.applied_precision` (float32, mixed-bfloat16, mixed-float16), in the framework's own idiom,
    and the framework part implements
        precision_ops(inputs) -> (ops, loss_scaling)   the compute operations of one forward pass
                                   of the model on `inputs` (the task's precision_inputs()) under
                                   that policy, as the framework ran them: a list of
                                   dlbench.precision.op(name, dtype, flops); loss_scaling: whether
                                   the training loss is scaled (a GradScaler, a LossScaleOptimizer)

    A framework whose idiom is its own training loop (Keras' model.fit) implements instead of
    batches and train_step:
        fit(clock)                 train every block of clock.upcoming(), one fit epoch per
                                   block, calling the RunClock's start and stop from the
                                   loop's per-epoch hooks

    The task's part implements:
        load_data()                the arrays or file lists; sets self.n_train
        evaluate() -> {metric: value}          after every convergence segment (first process)
        and may implement epoch_info(epoch) (e.g. the learning rate of the epoch) and
        final_evaluation() (at the end).
    """

    library_version = None  # a run of no framework: the version of the library it times (set by build_training)
    scratch = None          # a folder for the run's own files, removed with the run (set by the protocol)

    def __init__(self, spec, placement, adapter):
        self.spec, self.placement, self.adapter = spec, placement, adapter

    @property
    def applied_precision(self):
        """The precision policy the framework part applies (dlbench.precision.applied)."""
        return precision.applied(self.spec)

    @classmethod
    def check(cls, spec, device_kind):
        """Raise NotApplicable where this framework gives the point no meaning."""

    def build(self):
        """The data, the model, the same start in every framework, the training pieces.

        The start: the shared initial weights (dlbench.weights: drawn once from the seed, the
        workload and the model, in PyTorch's names and layouts), loaded through the framework's
        own load_weights before build_training makes optimizers, replicas or training state
        from the model; unless the spec names ImageNet weights (ChestX-ray's spec.weights, a
        file per framework), which build_model has loaded. `initial_weights` says which, for
        the record."""
        self.load_data()
        self.build_model()
        self.initial_weights = None  # a workload without a model (the loader benchmark)
        if getattr(self.spec, "weights", None):
            self.initial_weights = {"source": "imagenet", "sha256": file_sha256(self.spec.weights)}
        else:
            weights = initial_weights(self.spec)
            if weights is not None:
                self.load_weights(weights)
                self.initial_weights = {"source": "shared", "sha256": weights_sha256(weights)}
        self.build_training()

    def epoch_info(self, epoch):
        return {}

    def final_evaluation(self):
        return {}


class WithoutModel(Workload):
    """A workload with no model (a loader's or an image library's benchmark): nothing is
    trained, a step takes its batch and nothing else, there is nothing to evaluate."""

    def build_model(self):
        self.model = None

    def parameter_count(self):
        return None

    def train_step(self, batch):
        return None

    def evaluate(self):
        return {}
