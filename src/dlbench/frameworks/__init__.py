"""The frameworks the benchmark knows: the one place they are listed.

A framework is a line here, its env file envs/<name>.yaml (the one place its versions are
written), its adapter package beside this file (<module>/__init__.py; every use of the
framework's private API in <module>/internals.py, checked against the version it was written
for) (devices, processes, the device sync: see
dlbench.contract), and one module per workload, dlbench/workloads/<workload>/<module>.py.
Keras 3's three frameworks share one module of each: the same Keras code, on the backend
that the env's KERAS_BACKEND chooses.
"""
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from dlbench.errors import NotApplicable

EAGER, COMPILED = "eager", "compiled"   # what a mode is: op by op from Python, or a graph built once and run


@dataclass(frozen=True)
class Framework:
    module: str             # the adapter's and the workload modules' name
    modes: tuple            # its execution modes, (name, EAGER or COMPILED); the first is its default
    strategies: tuple = ()  # its data-parallel strategies for more than one device (its own engines)
    multi_node: tuple = ()  # those of them that span nodes, with its own mechanism (dlbench.nodes)
    engine: str = None      # the framework whose backend places and syncs its devices (Keras' backends)

    @property
    def default_mode(self):
        return self.modes[0][0]

    def mode_kind(self, mode):
        return dict(self.modes)[mode]


FRAMEWORKS = {
    # horovod: the studies' ring all-reduce; Horovod 0.28.1 does not build against these pins
    # (NOT_APPLICABLE, below, says where), so its runs are recorded as not applicable
    # Across nodes: DDP's env:// rendezvous, TF_CONFIG, MXNet's dist_sync kvstore (DMLC_*),
    # jax.distributed (JAX, and Keras' distribution on it). Not ChainerMN: mpiexec starts every
    # rank of every node from one place (over ssh, or srun --mpi), not one process per node.
    # Execution modes (a run's `mode`, read by its workload module): PyTorch eager, torch.compile,
    # or eager in the channels-last memory format (the CNNs); TensorFlow tf.function (graph), eager,
    # or tf.function(jit_compile=True) (XLA); MXNet hybridized (static graph) or imperative; Keras'
    # jit_compile on or off, on each backend (off: a tf.function on TensorFlow, eager on JAX and
    # torch); JAX jit; Chainer define-by-run. The memory-saving modes (RECOMPUTING) recompute
    # activations in the backward pass instead of keeping them: PyTorch's activation checkpointing,
    # TensorFlow's tf.recompute_grad (in a graph); they recompute DenseNet's dense layers, so only
    # ChestX-ray has them. Not MXNet's backward mirroring: in 1.9.1 only the symbolic executor reads
    # MXNET_BACKWARD_DO_MIRROR; a Gluon model trains through CachedOp, whose backward never mirrors.
    "pytorch": Framework("pytorch", (("eager", EAGER), ("compile", COMPILED), ("channels-last", EAGER),
                                     ("checkpoint", EAGER)),
                         ("ddp", "dp", "horovod"), ("ddp",)),
    "tensorflow": Framework("tensorflow", (("graph", COMPILED), ("eager", EAGER), ("xla", COMPILED),
                                           ("recompute", COMPILED)),
                            ("mirrored", "multiworker", "horovod"), ("multiworker",)),
    "mxnet": Framework("mxnet", (("hybrid", COMPILED), ("imperative", EAGER)), ("kvstore",), ("kvstore",)),
    "keras-tensorflow": Framework("keras", (("no-jit", COMPILED), ("jit", COMPILED)), ("mirrored",),
                                  engine="tensorflow"),
    "keras-jax": Framework("keras", (("jit", COMPILED), ("no-jit", EAGER)), ("data-parallel",), ("data-parallel",),
                           engine="jax"),
    "keras-torch": Framework("keras", (("no-jit", EAGER), ("jit", COMPILED)), ("data-parallel",), engine="pytorch"),
    "jax": Framework("jax", (("jit", COMPILED),), ("sharding",), ("sharding",)),
    "chainer": Framework("chainer", (("eager", EAGER),), ("chainermn",)),
}


RECOMPUTING = {"pytorch": "checkpoint", "tensorflow": "recompute"}  # the memory-saving modes

# What no run of these pins can do, known from its spec alone: {(framework, spec field, value): why}.
# Checked before the framework is imported (not_applicable_before_start), so that such a run is
# recorded as not applicable without its framework's start-up (seconds, in every sweep that has it).
# Both tried on 2026-11-25 with gcc 12.2 and cmake 3.25 (Gloo, no MPI; see docs/workloads.md, "Horovod").
HOROVOD_TORCH = ("Horovod 0.28.1 (its last release) does not build against torch 2.13.0: its CMakeLists compiles "
                 "its torch ops as C++14 (horovod/torch/CMakeLists.txt:67), and torch's headers need C++17 "
                 "('#error C++17 or later compatible compiler is required to use PyTorch', horovod#3996, fixed "
                 "after 0.28.1); CXXFLAGS=-std=c++17 comes before CMake's -std=c++14 and loses")
HOROVOD_TENSORFLOW = ("Horovod 0.28.1 (its last release) does not build against tensorflow 2.21.0: its XLA ops "
                      "(horovod/tensorflow/xla_mpi_ops.cc, always built) include tensorflow/compiler/xla/client/"
                      "xla_builder.h, which TensorFlow 2.21 moved to xla/hlo/builder/, and xla/printer.h needs "
                      "highwayhash headers outside TensorFlow's include flags")
NO_TORCH_DISTRIBUTION = ("keras.distribution runs on the JAX backend (and TensorFlow's) only in Keras 3.15.1, not "
                         "on torch; model.fit on the torch backend trains on one device")
NO_CHAINER_BFLOAT16 = ("Chainer 7 has no bfloat16: its dtypes are numpy's and CuPy's (float16, float32, float64), and "
                      "its mixed16 mode is float16")
NOT_APPLICABLE = {
    ("chainer", "precision", "mixed-bfloat16"): NO_CHAINER_BFLOAT16,
    ("pytorch", "strategy", "horovod"): HOROVOD_TORCH,
    ("tensorflow", "strategy", "horovod"): HOROVOD_TENSORFLOW,
    ("keras-torch", "strategy", "data-parallel"): NO_TORCH_DISTRIBUTION,
    # nn.Embedding(sparse=True) with SparseAdam: the others have no sparse embedding gradient
    **{(name, "grad", "sparse"): "sparse embedding gradients are a PyTorch sweep dimension"
       for name in FRAMEWORKS if name != "pytorch"},
}


def not_applicable_before_start(spec, modes_not_applicable=()):
    """Raise NotApplicable where the run's spec asks for what its framework cannot do at these pins
    (NOT_APPLICABLE), or for a mode its run set's model gives no meaning (modes_not_applicable:
    the RunSet's); nothing of the framework is imported here."""
    for (framework, field, value), reason in NOT_APPLICABLE.items():
        if spec.framework == framework and getattr(spec, field, None) == value:
            raise NotApplicable(reason)
    for framework, mode, reason in modes_not_applicable:
        if spec.framework == framework and getattr(spec, "mode", None) == mode:
            raise NotApplicable(reason)


def without_recomputing(run_set):
    """RunSet.modes_not_applicable of a run set whose model has no dense layers: the memory-saving
    modes (RECOMPUTING) recompute a DenseNet's (ChestX-ray's)."""
    return tuple((framework, mode, f"mode {mode!r} recomputes DenseNet's dense layers in the backward pass to save "
                                   f"memory (ChestX-ray's model); {run_set}'s model has none")
                 for framework, mode in RECOMPUTING.items())


NO_FRAMEWORK = "dlbench.no_framework"  # the adapter of runs of no framework (framework None)


def adapter_module(framework):
    return NO_FRAMEWORK if framework is None else f"dlbench.frameworks.{FRAMEWORKS[framework].module}"


def adapter_modules(framework):
    """The adapter modules a framework's runs execute: its own, and its engine's."""
    engine = FRAMEWORKS[framework].engine if framework else None
    return [adapter_module(framework), *([adapter_module(engine)] if engine else [])]


def reported(read):
    """What a framework reports about itself (read()), None where this version cannot say:
    a record's description never stops a run."""
    try:
        return read()
    except Exception:  # a missing attribute or function in another version of the framework
        return None


class UnknownVersion(RuntimeError):
    """A framework's private API is used by code written for another version of it."""


# "1" where the config's private_api_override is true (set by the workflow for its jobs, which
# pass it to the training process): a version other than WRITTEN_FOR is run, and recorded.
PRIVATE_API_OVERRIDE = "DLBENCH_PRIVATE_API_OVERRIDE"
# What this process ran under the override: the run's record says it (environment.private_api_overrides).
PRIVATE_API_OVERRIDES = []


def check_written_for(module_file, package, version, written_for):
    """Stop where `package` is not the version an internals module was written for: its private
    API may have moved or changed meaning, silently. The module's docstring lists what each use
    works around; check them against the new version, then update its WRITTEN_FOR.

    Under the override (config private_api_override, for an environment the user cannot change:
    a cluster's module or container), it goes on, says so on stderr and keeps both versions in
    PRIVATE_API_OVERRIDES for the run's record: never silently."""
    if version == written_for:
        return
    src = Path(__file__).resolve().parents[2]
    module = Path(module_file).resolve()
    module = str(module.relative_to(src)) if module.is_relative_to(src) else str(module_file)
    if os.environ.get(PRIVATE_API_OVERRIDE) == "1":
        used = {"module": module, "package": package, "found": version, "written_for": written_for}
        if used not in PRIVATE_API_OVERRIDES:
            PRIVATE_API_OVERRIDES.append(used)
        print(f"private API override: {module} was written for {package} {written_for} and runs on {package} "
              f"{version} (config private_api_override: true; the run's record says so)", file=sys.stderr, flush=True)
        return
    raise UnknownVersion(
        f"{module}: uses {package} {written_for}'s private API (see that file's docstring for what each "
        f"use works around), but this environment has {package} {version}: check each use against {version}, "
        f"then set WRITTEN_FOR there; or run on {package} {version} as it is with config "
        f"private_api_override: true (each run's record then says so)")
