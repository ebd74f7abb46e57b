"""The contract between the protocol and a framework, in code: what a framework's adapter
implements (`Adapter`), what a workload implements in one framework (`FrameworkPart`: in the
protocol's loop, `Steps`, or in the framework's own, `OwnLoop`) and where a process computes
(`Placement`); the two ways a point can refuse to run are dlbench.errors' NotApplicable and
FrameworkError. The protocol (dlbench.protocol) calls these; it is not imported here, so a
framework module imports this file and the clock (dlbench.clock), never the protocol.

Both are checked when a framework's module loads, not when a run first calls what is missing: an
adapter module ends with `verify_adapter(__name__)`, a workload's framework class lists `Steps` or
`OwnLoop` last among its bases; a missing method stops the import with a ContractError naming the
module or the class and each method missing.

A framework's code has one module per role, of the same name in every framework
(dlbench/frameworks/<module>/):
    __init__.py     the adapter (`Adapter`): devices, processes, the device sync
    step.py         what every workload module of the framework shares: its `WorkloadMethods`
                    (predictions, the parameter count, loading the shared weights, the precision's
                    proof, the step or the loop the framework runs them in; a mixin that completes
                    no workload alone: a workload's framework class puts it before the task's
                    class, `class PyTorchMnist(WorkloadMethods, Mnist, Steps)`) and its helpers
                    (the optimizer, the precision policy)
    loaders.py      its own input pipelines, where it has them
    internals.py    every use of the framework's private API (dlbench.frameworks.check_written_for)
and one module per workload, dlbench/workloads/<workload>/<module>.py (`Workload`).
"""
import inspect
import sys
import types
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np

from dlbench import precision
from dlbench.files import file_sha256
from dlbench.weights import initial_weights, weights_sha256


class ContractError(TypeError):
    """A framework's module lacks what the contract asks of it (raised as the module loads)."""


def _call(method):
    """A contract method as it is called: its name and parameters, without self ("sync(placement, pending)")."""
    parameters = list(inspect.signature(method).parameters.values())[1:]
    return f"{method.__name__}({', '.join(p.name for p in parameters)})"


def _takes(function, method):
    """Whether `function` can be called with the arguments of the contract's `method`."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # a callable without a signature to read: taken as it is
        return True
    try:
        signature.bind(*list(inspect.signature(method).parameters)[1:])
    except TypeError:
        return False
    return True


def _declared(contract):
    """{name: method} of the methods a contract class declares (its own and its bases'), public ones."""
    return {name: value for klass in reversed(contract.__mro__) if klass not in (ABC, object)
            for name, value in vars(klass).items() if inspect.isfunction(value) and not name.startswith("_")}


def _abstract(cls):
    """The names of the abstract methods that `cls` still has (none implemented along its MRO)."""
    return sorted(name for name in dir(cls) if not name.startswith("__")
                  and getattr(inspect.getattr_static(cls, name, None), "__isabstractmethod__", False))


class Adapter(ABC):
    """A framework's adapter, dlbench/frameworks/<module>/__init__.py: a module whose functions are
    these methods (the module is the adapter, so they take no self), in the framework's own idiom.
    It may offer its workload modules more (PyTorch's device(placement), wrap(model, placement)).

    The module ends with `verify_adapter(__name__)`, which checks it against this class as it
    loads: a method missing, or a function that does not take the method's arguments, stops the
    import with a ContractError naming the module and the methods. An optional method (one with
    a body here) that the module leaves out is this class's, the module as its self."""

    def configure(self, spec):
        """Process-wide settings that must precede the framework's start (JAX's CPU device count),
        called first. Optional: by default nothing."""

    @abstractmethod
    def version(self):
        """The framework's version (str)."""

    @abstractmethod
    def visible_gpus(self):
        """GPUs this build of the framework can use (int)."""

    @abstractmethod
    def check(self, spec, device_kind):
        """Raise NotApplicable for a point without meaning here."""

    @abstractmethod
    def launch(self, spec, target, args):
        """Run target(rank, *args) in each process of the run (on this node)."""

    @abstractmethod
    def setup(self, spec, device_kind, rank):
        """This process's threads, devices and process group: its Placement."""

    @abstractmethod
    def barrier(self, placement):
        """Every process of the run reaches this point."""

    @abstractmethod
    def sync(self, placement, pending):
        """The device's queued work is done, in every process; pending: the block's last device
        value (the loss sum)."""

    @abstractmethod
    def to_float(self, value):
        """A device scalar on the host (float)."""

    @abstractmethod
    def mean_over_processes(self, value, placement):
        """The mean of a float over the run's processes (float)."""

    @abstractmethod
    def gpu_allocator_peak(self, placement):
        """The allocator's own peak, {measure: bytes}, or {}."""

    @abstractmethod
    def describe(self, placement):
        """Device names and thread settings, for the record (dict); under framework_cpu, what the
        framework says it uses on the CPU."""

    @abstractmethod
    def flushes_denormals(self):
        """Whether a denormal times one, in the framework's own ops and threads, comes out zero
        (dlbench.numerics)."""

    @abstractmethod
    def cudnn_autotune(self, on):
        """cuDNN's autotuning on or off in the framework's own terms, before it starts (idempotent);
        returns what it set ({flag or variable: value}, dlbench.numerics.CUDNN_AUTOTUNE)."""

    @abstractmethod
    def gpu_float32(self, policy):
        """float32 products on GPUs in full float32 or TF32, in the framework's own terms, before it
        starts (idempotent); returns what it reads back (dlbench.numerics)."""

    @abstractmethod
    def compile_cache(self, directory):
        """The framework's persistent cache of compiled programs in that folder, before it compiles
        anything; returns what it set ({} where the framework compiles nothing it can keep)."""

    @abstractmethod
    def float32_product(self, a, b, placement):
        """a @ b of float32 numpy arrays, computed by the framework on the run's device, as numpy."""

    @abstractmethod
    def teardown(self, placement):
        """The end of this process's part of the run (the process group left)."""


def verify_adapter(module):
    """The adapter module (or its name), checked against `Adapter`: the module, its optional
    methods that it leaves out set to Adapter's; a ContractError naming the module and each
    method that it lacks or whose function does not take the method's arguments. Called at the
    end of each adapter module, and by the protocol on the adapter it loads (idempotent)."""
    if isinstance(module, str):
        module = sys.modules[module]
    lacking = []
    for name, method in _declared(Adapter).items():
        function = getattr(module, name, None)
        if function is None and not getattr(method, "__isabstractmethod__", False):
            setattr(module, name, types.MethodType(method, module))  # the default, the module as self
        elif function is None or not callable(function) or not _takes(function, method):
            lacking.append(_call(method))
    if lacking:
        raise ContractError(f"adapter module {module.__name__} lacks {', '.join(lacking)} (dlbench.contract.Adapter: "
                            f"a function of each name, taking those arguments)")
    return module


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
    dlbench/workloads/<workload>/task.py: data, metrics) and the framework's part (a subclass of
    that in dlbench/workloads/<workload>/<framework>.py, named WORKLOAD there), which lists its
    contract, `Steps` or `OwnLoop` (`FrameworkPart`), last among its bases:

        class PyTorchMnist(WorkloadMethods, Mnist, Steps):  # the framework's shared methods, the task, the contract

    `build` runs outside the clock: the task's load_data(), then the framework's
    build_model() and build_training().

    The task's part implements load_data() and evaluate() (FrameworkPart), and may implement
    epoch_info(epoch) (e.g. the learning rate of the epoch), final_evaluation() (at the end) and,
    where its run set has precisions, precision_inputs() (the inputs of the precision's proof).
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


class FrameworkPart:
    """What the protocol calls on a workload in one framework, its task's class and its
    framework's together: every abstract method here (and those of `Steps` or `OwnLoop`, which a
    framework's class lists, last among its bases, after the task's class, so that nothing that
    the task's class or Workload defines is hidden by a declaration here).

    Checked when the class is defined, that is when its module loads: a method missing (in the
    class, its framework's WorkloadMethods, the task's class or Workload) stops the import with a
    ContractError naming the class and each method. (Not an abc.ABC: ABCMeta would check at the
    first instance, not at the import, and its subclass caches would keep a class whose check
    failed.)

    The framework's part may also implement the classmethod check(spec, device_kind), which
    raises NotApplicable for a point without meaning in this framework (Workload.check: none).

    Precision (dlbench.precision; a run set with precisions): the model trains, and predicts, in
    `self.applied_precision` (float32, mixed-bfloat16, mixed-float16), in the framework's own
    idiom."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.__module__ == __name__:  # the contract's own: Steps, OwnLoop
            return
        name = f"{cls.__module__}.{cls.__qualname__}"
        if not issubclass(cls, Workload) or cls.__mro__.index(FrameworkPart) < cls.__mro__.index(Workload):
            raise ContractError(f"{name}: a workload's framework class lists its contract last among its bases, after "
                                f"the task's class (a Workload): class {cls.__name__}(<its framework's WorkloadMethods>, "
                                f"<the task's class>, Steps or OwnLoop)")
        if issubclass(cls, Steps) == issubclass(cls, OwnLoop):
            raise ContractError(f"{name}: trains in the protocol's loop (Steps) or in the framework's own (OwnLoop): "
                                f"one of them, not {'both' if issubclass(cls, Steps) else 'neither'}")
        missing = _abstract(cls)
        if missing:
            contract = Steps if issubclass(cls, Steps) else OwnLoop
            raise ContractError(f"{name} lacks " + ", ".join(_call(inspect.getattr_static(cls, m)) for m in missing)
                                + f" (dlbench.contract.{contract.__name__}: the task's class or the framework's "
                                f"implements each)")

    # -- the task's part (dlbench/workloads/<workload>/task.py)

    @abstractmethod
    def load_data(self):
        """The arrays or file lists; sets self.n_train."""

    @abstractmethod
    def evaluate(self):
        """{metric: value}, after every convergence segment (the first process)."""

    # -- the framework's part (dlbench/workloads/<workload>/<framework>.py, its WorkloadMethods)

    @abstractmethod
    def build_model(self):
        """self.model, initialised from the seed."""

    @abstractmethod
    def build_training(self):
        """Optimizer, loaders (and their worker pools), wrappers."""

    @abstractmethod
    def parameter_count(self):
        """Trainable parameters of self.model."""

    @abstractmethod
    def predict(self, inputs):
        """numpy inputs -> numpy outputs, in inference mode."""

    @abstractmethod
    def load_weights(self, weights):
        """{name: numpy array} in PyTorch's names and layouts, with the conversion this framework
        needs (the shared start; the parity test)."""

    @abstractmethod
    def precision_ops(self, inputs):
        """(ops, loss_scaling): the compute operations of one forward pass of the model on `inputs`
        (the task's precision_inputs()) under the run's precision policy, as the framework ran them,
        a list of dlbench.precision.op(name, dtype, flops); loss_scaling: whether the training loss
        is scaled (a GradScaler, a LossScaleOptimizer)."""


class Steps(FrameworkPart):
    """A framework part in the protocol's loop (dlbench.clock.run_blocks): its batches, one step
    each."""

    @abstractmethod
    def batches(self, order, epochs):
        """ONE iterable of this process's device batches of `order` (the run's index batches, every
        epoch back to back) and `epochs` (each step's epoch: augmentation draws from it); made
        once, iterated across every block of the run."""

    @abstractmethod
    def train_step(self, batch):
        """One step; returns the loss on the device (None: no loss)."""

    def set_learning_rate(self, lr):
        """The learning rate from the next step on; where the task's epoch_info gives one, the
        framework's part implements it."""
        raise NotImplementedError(f"{type(self).__qualname__}: its task's epoch_info gives a learning rate ({lr}), "
                                  f"and it implements no set_learning_rate (dlbench.contract.Steps)")


class OwnLoop(FrameworkPart):
    """A framework part whose idiom is its own training loop (Keras' model.fit), instead of the
    protocol's batches and steps."""

    @abstractmethod
    def fit(self, clock):
        """Train every block of clock.upcoming(), one fit epoch per block, calling the RunClock's
        start and stop from the loop's per-epoch hooks (with the learning rate of each step's
        epoch, clock.learning_rate, where the task's epoch_info gives one)."""


class WithoutModel(Workload):
    """A workload with no model (a loader's or an image library's benchmark): nothing is
    trained, a step takes its batch and nothing else, there is nothing to evaluate, nothing to
    predict, no weights to load and no forward pass to prove a precision by."""

    def build_model(self):
        self.model = None

    def parameter_count(self):
        return None

    def train_step(self, batch):
        return None

    def evaluate(self):
        return {}

    def predict(self, inputs):
        raise TypeError(f"{type(self).__qualname__} has no model to predict with")

    def load_weights(self, weights):
        raise TypeError(f"{type(self).__qualname__} has no model to load weights into")

    def precision_ops(self, inputs):
        raise TypeError(f"{type(self).__qualname__} has no model whose precision to prove")
