"""ChestX-ray's inputs (chestxray.inputs): a `device` input never copies from the host inside a
timed step, and `synthetic` and `device` train to the same losses (the same data in the same
order). Each run is the training process itself (`python -m dlbench.protocol`, as the harness
starts it) on the smoke preset's DenseNet-21, with the framework's host-to-device calls
counted while a block's clock runs (from RunClock.start to the sync in RunClock.stop; Chainer's
and TensorFlow's while the protocol's loop takes a batch: their own functions send and convert
arrays of their own). JAX checks at its runtime too: its transfer guard refuses any
host-to-device transfer in the timed blocks, implicit ones included (Keras on JAX: in fit's
train function, the batch taken and the step). No GPU here: on the CPU the device is the host,
so what is checked is that the input path makes no call that would copy on a GPU; each
framework's `synthetic` run shows that the counters see the calls of a path that does."""
import json
import subprocess

import pytest

from conftest import outcome_of, side_by_side, venv_python
from dlbench.specs import spec_to_json
from specs import smoke_spec

pytestmark = pytest.mark.slow

# The training process with its host-to-device calls counted inside the clock; it writes the
# counts beside its results (OUT.calls.json) when the protocol ends (os._exit).
COUNTED = r"""
import json, os, sys

import numpy as np

from dlbench import protocol
from dlbench.clock import RunClock

FRAMEWORK, SPEC, OUT, GUARD = sys.argv[1:5]
TIMED, FETCHING, CALLS = [False], [False], {}


def counted(owner, name, label, numpy_only=False, fetching_only=False):
    # calls inside the clock (fetching_only: while the protocol's loop takes its next batch;
    # numpy_only: those given a numpy array, the host's)
    original = getattr(owner, name)

    def call(*args, **kwargs):
        if (TIMED[0] and (FETCHING[0] or not fetching_only)
                and (not numpy_only or any(isinstance(a, np.ndarray) for a in args))):
            CALLS[label] = CALLS.get(label, 0) + 1
        return original(*args, **kwargs)

    setattr(owner, name, call)


def guard(on):
    pass


if FRAMEWORK == "pytorch":
    import torch
    import dlbench.frameworks.pytorch as adapter

    for name in ("to", "cuda", "pin_memory", "copy_"):
        counted(torch.Tensor, name, f"Tensor.{name}")
    for name in ("from_numpy", "as_tensor"):
        counted(torch, name, f"torch.{name}")
    counted(adapter, "to_device", "adapter.to_device")
elif FRAMEWORK == "keras-torch":  # Keras converts its own numbers too: numpy arrays only
    import torch

    for name in ("from_numpy", "as_tensor"):
        counted(torch, name, f"torch.{name}", numpy_only=True)
elif FRAMEWORK in ("jax", "keras-jax"):
    import jax

    for name in ("device_put", "make_array_from_process_local_data"):
        counted(jax, name, f"jax.{name}")

    def guard(on):
        if GUARD == "guard":
            jax.config.update("jax_transfer_guard_host_to_device", "disallow_explicit" if on else "allow")
elif FRAMEWORK == "tensorflow":
    from tensorflow.python.data.ops import iterator_ops
    from tensorflow.python.framework import constant_op, ops

    counted(iterator_ops.OwnedIterator, "__next__", "tf.data iterator")
    # (tracing the step converts a few numpy constants, once)
    counted(constant_op, "constant", "tf.constant", numpy_only=True, fetching_only=True)
    counted(ops, "convert_to_tensor", "convert_to_tensor", numpy_only=True, fetching_only=True)
elif FRAMEWORK == "chainer":  # Chainer's functions send their own arrays: the batches' only
    from chainer import _backend

    counted(_backend.Device, "send", "Device.send", fetching_only=True)

if FRAMEWORK == "keras-jax":
    # Keras reads fit's logs (its metrics' Python numbers) inside the clock: the guard is on
    # in its train function (the batch taken and the step), not around it
    from keras.src.backend.jax.trainer import JAXTrainer

    make = JAXTrainer.make_train_function

    def make_guarded(self, force=False):
        make(self, force)
        function = self.train_function

        def guarded(*args, **kwargs):
            jax.config.update("jax_transfer_guard_host_to_device", "disallow_explicit" if TIMED[0] else "allow")
            try:
                return function(*args, **kwargs)
            finally:
                jax.config.update("jax_transfer_guard_host_to_device", "allow")

        self.train_function = guarded

    JAXTrainer.make_train_function = make_guarded
    guard = lambda on: None  # noqa: E731

workload_class = protocol.workload_class


def fetched(spec):
    cls = workload_class(spec)
    if not hasattr(cls, "batches"):
        return cls

    class Fetched(cls):
        def batches(self, order, epochs):
            batches = iter(super().batches(order, epochs))

            def each():
                while True:
                    FETCHING[0] = True
                    try:
                        batch = next(batches)
                    except StopIteration:
                        return
                    finally:
                        FETCHING[0] = False
                    yield batch

            return each()

    return Fetched


protocol.workload_class = fetched
start, stop = RunClock.start, RunClock.stop


def timed_start(self):
    start(self)
    TIMED[0] = True
    guard(True)


def timed_stop(self, *args, **kwargs):
    TIMED[0] = False
    guard(False)
    return stop(self, *args, **kwargs)


RunClock.start, RunClock.stop = timed_start, timed_stop
real_exit, training = os._exit, os.getpid()


def exit_with_counts(code):
    if os.getpid() == training:  # not a loader worker (forked, it ends with os._exit too)
        with open(OUT + ".calls.json", "w") as f:
            json.dump(CALLS, f)
    real_exit(code)


os._exit = exit_with_counts
sys.argv = ["dlbench.protocol", SPEC, OUT]
protocol.main()
"""

# The transfer counters of each framework (MXNet's CPU NDArrays give none to tell a host array
# from a device one: its `device` input is left to the code and the smoke runs).
FRAMEWORKS = ("pytorch", "jax", "tensorflow", "chainer", "keras-jax", "keras-torch")
DISALLOWED = "Disallowed host-to-device transfer"  # JAX's transfer guard


def counted_run(framework, input, guard, workdir, folder):
    """(the training process's results or None, its host-to-device calls inside the clock, its
    stderr); guard: JAX's transfer guard on in the timed blocks."""
    spec = smoke_spec("chestxray", framework, input=input)
    name = f"{framework}-{input}-{'guard' if guard else 'count'}"
    spec_path, out = folder / f"{name}.json", folder / f"{name}.results.json"
    spec_path.write_text(spec_to_json(spec))
    proc = subprocess.run([venv_python(framework), "-c", COUNTED, framework, str(spec_path), str(out),
                           "guard" if guard else "count"],
                          cwd=workdir, capture_output=True, text=True, check=False)
    calls_path = out.with_name(out.name + ".calls.json")
    calls = json.loads(calls_path.read_text()) if calls_path.exists() else None
    results = json.loads(out.read_text()) if out.exists() else None
    return results, calls, proc.stderr


@pytest.fixture(scope="module")
def input_runs(smoke_data, tmp_path_factory):
    folder = tmp_path_factory.mktemp("inputs")
    cases = [(framework, input, True) for framework in FRAMEWORKS for input in ("synthetic", "resident")]
    cases += [("jax", "synthetic", False), ("mxnet", "synthetic", True), ("mxnet", "resident", True),
              ("keras-tensorflow", "resident", True)]
    return side_by_side({case: lambda case=case: counted_run(*case, smoke_data, folder) for case in cases})


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_resident_input_copies_nothing_from_the_host_in_a_timed_step(framework, input_runs):
    results, calls, stderr = outcome_of(input_runs, (framework, "resident", True))
    assert results is not None and results.get("status") == "ok", stderr[-3000:]
    assert calls == {}, calls
    # the counters see a path that copies: the synthetic input's
    results, calls, stderr = outcome_of(input_runs, (framework, "synthetic", True))
    if framework in ("jax", "keras-jax"):
        assert DISALLOWED in stderr, stderr[-3000:]  # the guard stopped its first timed step
    else:
        assert results["status"] == "ok" and calls, (calls, stderr[-3000:])


def test_keras_tensorflow_has_no_resident_input(input_runs):
    results, _, stderr = outcome_of(input_runs, ("keras-tensorflow", "resident", True))
    assert results == {"status": "not_applicable", "reason": results["reason"]}, stderr[-3000:]
    assert "tf.data" in results["reason"]


@pytest.mark.parametrize("framework", ["pytorch", "jax", "tensorflow", "mxnet", "chainer", "keras-torch"])
def test_synthetic_and_resident_inputs_train_to_the_same_losses(framework, input_runs):
    """The same tensors in the same order, gathered on the host or on the device: the same loss at
    every block (JAX's synthetic run without the guard, which stops it)."""
    losses = {}
    for input in ("synthetic", "resident"):
        results, _, stderr = outcome_of(input_runs, (framework, input, not (framework == "jax" and input == "synthetic")))
        assert results["status"] == "ok", stderr[-3000:]
        losses[input] = [block["loss"] for block in results["segments"] + results["units"]]
    assert len(losses["resident"]) >= 3 and losses["resident"] == pytest.approx(losses["synthetic"], rel=1e-5)
