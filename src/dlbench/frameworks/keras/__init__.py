"""Keras 3's backend, one module for the frameworks keras-tensorflow, keras-jax and keras-torch
(the contract: dlbench.contract), and what the Keras workload modules share: the PyDataset of
the run's order, the callback that drives the protocol's clock, model.fit, predictions.

Which Keras backend runs is the environment's KERAS_BACKEND (envs/keras-<backend>.yaml sets
it; the venv's interpreter wrapper exports it), never this code: `check_backend` only checks
that keras.backend.backend() is the one the framework's name says, and stops naming
KERAS_BACKEND and the env file otherwise. Placement, threads and the device sync are the
engine's own adapter module's: dlbench.frameworks.tensorflow (threads, visible devices, the
tf.distribute strategy), dlbench.frameworks.jax (the CPU device count and threads, set by its
configure before JAX starts; the sync blocks on a value), dlbench.frameworks.pytorch (threads).
Keras is imported only after `configure` (KERAS_TORCH_DEVICE is read at import).

Strategies, all in one process on a node: "none"; keras-tensorflow "mirrored", tf.distribute's
MirroredStrategy over this process's devices (made by the TensorFlow adapter's setup: on a CPU
one logical device per replica), the model built and compiled in its scope; keras-jax
"data-parallel", keras.distribution.DataParallel over N JAX devices (N CPU devices on a CPU),
set before the model is built. Across nodes (dlbench.nodes) keras-jax runs one process per node,
joined by keras.distribution.initialize (jax.distributed at node 0's address); DataParallel
spans every process's devices, and each process's PyDataset gives its slice of the global batch
(Placement.local), which Keras' JAX trainer assembles into the global one
(jax.make_array_from_process_local_data); process 0 evaluates alone, on its replica of the
variables (step.py). keras-torch has none: keras.distribution has no torch
implementation in Keras 3.15.1 (keras/src/backend/__init__.py sets distribution_lib to None
for torch) and the torch trainer's fit runs on one device, so a point of more than one device
is not applicable. Either engine splits each global batch into contiguous per-replica
slices, replica r taking slice r, as dlbench.contract.shard does.

Precision (dlbench.precision): Keras' dtype policies, "mixed_bfloat16" and "mixed_float16"
(float32 variables, compute in the 16-bit type), set globally while the model is built
(`dtype_policy`), each layer keeping the policy it was made under; the logits' layer is
float32 (dtype="float32"), as Keras' mixed-precision guide says; BatchNormalization follows the
policy as Keras does (its statistics in float32). The proof is the engine's own record of a
forward pass (its adapter's forward_ops: the traced graph, the compiled HLO, the dispatched aten
ops), made by step.WorkloadMethods.precision_ops.

What the Keras workload modules share is beside it: model.fit driven by the protocol's clock
(step.py), the PyDataset of the run's order and keras-tensorflow's tf.data pipeline of it
(loaders.py), the uses of Keras' private API (internals.py).
"""
import contextlib
import dataclasses
import importlib
import os

from dlbench.contract import verify_adapter
from dlbench.frameworks import FRAMEWORKS, adapter_module
from dlbench.errors import FrameworkError, NotApplicable
from dlbench.nodes import this_node

# framework (keras-<backend>, dlbench.frameworks) -> the Keras backend it runs on, and that
# adapter -> the benchmark's adapter module of its engine (placement, threads, sync)
KERAS_BACKENDS = {name: name.removeprefix("keras-") for name, framework in FRAMEWORKS.items()
                  if framework.module == "keras"}
ENGINE_MODULES = {KERAS_BACKENDS[name]: adapter_module(framework.engine) for name, framework in FRAMEWORKS.items()
                  if framework.module == "keras"}
# Keras backend -> strategy -> the engine module's name for the same placement
STRATEGIES = {"tensorflow": {"none": "none", "mirrored": "mirrored"},
              "jax": {"none": "none", "data-parallel": "sharding"},
              "torch": {"none": "none"}}
# Tried on a CPU (two logical devices; Keras 3.15.1, TF 2.21.0): fit's step fails at its first call
MIRRORED_JIT = ("mode jit under the mirrored strategy: Keras' fit compiles its whole step, strategy.run over every "
                "replica, into one XLA function, and XLA runs it on one device, from which the other replicas' "
                "variables are out of reach (\"Trying to access resource ... located in device CPU:1 from device "
                "CPU:0\", TensorFlow's known XLA issue \"tf.Variable on a different device\"); Keras' own "
                "jit_compile=\"auto\" turns XLA off under tf.distribute for this reason")
# dlbench.precision's policies -> Keras' dtype policies
DTYPE_POLICIES = {"float32": "float32", "mixed-bfloat16": "mixed_bfloat16", "mixed-float16": "mixed_float16"}


def keras_backend_of(framework):
    if framework not in KERAS_BACKENDS:
        raise ValueError(f"{framework!r} is not a Keras framework ({', '.join(KERAS_BACKENDS)})")
    return KERAS_BACKENDS[framework]


def check_backend(spec):
    """The Keras backend of this interpreter, which must be the one spec.framework names."""
    import keras

    expected, actual = keras_backend_of(spec.framework), keras.backend.backend()
    if actual != expected:
        raise FrameworkError(
            f"{spec.framework} runs Keras on its {expected} backend, but this interpreter's Keras runs on {actual} "
            f"(KERAS_BACKEND={os.environ.get('KERAS_BACKEND')!r}): run it with the interpreter of "
            f"envs/{spec.framework}.yaml, which sets KERAS_BACKEND={expected}")
    return actual


def engine(name=None):
    """The engine's backend module, of the Keras backend `name` (default: this interpreter's)."""
    if name is None:
        import keras

        name = keras.backend.backend()
    return importlib.import_module(ENGINE_MODULES[name])


def engine_spec(spec):
    """The spec as the engine's adapter module reads it (its own strategy names)."""
    strategies = STRATEGIES[keras_backend_of(spec.framework)]
    return dataclasses.replace(spec, strategy=strategies.get(spec.strategy, spec.strategy))


# --- the adapter contract ----------------------------------------------------------------------------

def configure(spec):
    """Before Keras and its engine start: the engine's own settings (JAX's CPU device count and
    threads), Keras' torch device when the run is on the CPU; then the backend check; then, in a
    keras-jax run of several nodes, Keras joins the other nodes' processes (`join`)."""
    name = keras_backend_of(spec.framework)
    if name == "torch" and spec.device_kind == "cpu":
        os.environ["KERAS_TORCH_DEVICE"] = "cpu"  # read once, when Keras is imported
    module = engine(name)
    if name == "jax":
        module.configure(engine_spec(spec), join=False)  # Keras' own initialize joins (below)
    else:
        module.configure(engine_spec(spec))  # the Adapter's default (nothing) where the engine has none
    check_backend(spec)
    if name == "jax" and spec.nodes > 1:
        join(spec)


def join(spec):
    """keras.distribution.initialize: jax.distributed.initialize at node 0's address (the
    engine's join_arguments), and Keras' random seed agreed across the processes."""
    import keras

    node = this_node(spec)
    arguments = engine("jax").join_arguments(spec, node)
    # Keras passes no local device ids: JAX reads them from here (else, under SLURM, one device a task)
    os.environ["JAX_LOCAL_DEVICE_IDS"] = ",".join(map(str, arguments["local_device_ids"]))
    keras.distribution.initialize(job_addresses=arguments["coordinator_address"],
                                  num_processes=arguments["num_processes"], process_id=arguments["process_id"])


def version():
    import keras

    return keras.__version__


def visible_gpus():
    return engine().visible_gpus()


def cudnn_autotune(on):
    return engine().cudnn_autotune(on)


def gpu_float32(policy):
    return engine().gpu_float32(policy)


def compile_cache(directory):
    return engine().compile_cache(directory)


def float32_product(a, b, placement):
    """Keras' own product (keras.ops.matmul), in its engine's kernels, on its default device (the
    GPU where the run has one)."""
    import keras

    return keras.ops.convert_to_numpy(keras.ops.matmul(a, b))


def check(spec, device_kind):
    name = check_backend(spec)
    if spec.strategy not in STRATEGIES[name]:
        raise ValueError(f"unknown {spec.framework} strategy {spec.strategy!r}, expected one of "
                         f"{tuple(STRATEGIES[name])}")
    if (spec.strategy == "none") != (spec.devices == 1):
        raise ValueError(f"strategy none runs on one device, {spec.strategy} on more ({spec.devices} asked for)")
    if spec.mode == "jit" and spec.strategy == "mirrored":
        raise NotApplicable(MIRRORED_JIT)


def launch(spec, target, args):
    """One process a node: Keras' data parallelism drives every device of the node from it."""
    target(0, *args)


def setup(spec, device_kind, rank):
    name = check_backend(spec)
    placement = engine(name).setup(engine_spec(spec), device_kind, rank)
    placement.handles.update(keras_backend=name, keras_strategy=spec.strategy)
    if spec.strategy == "data-parallel":
        import keras

        devices = keras.distribution.list_devices(device_kind)
        if len(devices) < spec.devices:
            raise FrameworkError(f"keras-jax sees {len(devices)} {device_kind} device(s), the run asks for "
                                 f"{spec.devices}: the JAX adapter's configure sets the CPU device count")
        # Across nodes each process's PyDataset already gives its slice of every global batch
        # (Placement.local); Keras' auto-sharding takes tf.data datasets only (one process: unused).
        keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices[:spec.devices],
                                                                            auto_shard_dataset=False))
    return placement


def scope(placement):
    """Where the model and its optimizer are made: the MirroredStrategy's scope (keras-tensorflow
    mirrored), else nothing (Keras' default strategy; keras-jax's distribution is global)."""
    if placement.handles.get("keras_strategy") == "mirrored":
        return placement.handles["strategy"].scope()
    return contextlib.nullcontext()


@contextlib.contextmanager
def dtype_policy(policy):
    """Keras' global dtype policy of the precision `policy` while a model is built (its layers
    keep it), the one before restored after: it is global state."""
    import keras

    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(DTYPE_POLICIES[policy])
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def replicas(placement):
    return placement.local_devices


def barrier(placement):
    engine(placement.handles["keras_backend"]).barrier(placement)


def sync(placement, pending):
    engine(placement.handles["keras_backend"]).sync(placement, pending)


def to_float(value):
    return float(value)  # fit's logs are already numbers on the host


def mean_over_processes(value, placement):
    return engine(placement.handles["keras_backend"]).mean_over_processes(value, placement)


def gpu_allocator_peak(placement):
    return engine(placement.handles["keras_backend"]).gpu_allocator_peak(placement)


def describe(placement):
    import keras

    name = placement.handles["keras_backend"]
    module = engine(name)
    return {**module.describe(placement), "keras": keras.__version__, "keras_backend": name,
            "keras_backend_version": module.version(), "strategy": placement.handles["keras_strategy"],
            "jit_compile": placement.handles.get("jit_compile")}  # what Keras resolved (step.py: compile)


def flushes_denormals():
    """Keras' ops run in its engine's kernels: the engine's probe."""
    return engine().flushes_denormals()


def teardown(placement):
    engine(placement.handles["keras_backend"]).teardown(placement)


verify_adapter(__name__)  # the contract (dlbench.contract.Adapter), checked as this module loads
