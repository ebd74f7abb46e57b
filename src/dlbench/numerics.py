"""One numerics policy for every framework: denormal floats flushed to zero, or not touched.

TensorFlow and XLA (JAX, Keras on TensorFlow and on JAX) set the CPU's flush-to-zero (FTZ)
and denormals-are-zero (DAZ) modes in the threads that run their kernels; PyTorch and MXNet
do not. Arithmetic on denormals is many times slower on x86 CPUs, so without one policy a
ratio of two frameworks also compares two numerics modes (a PyTorch LSTM step measured at
about half the cost with flushing).

    flush               FTZ and DAZ set in the training process before any framework starts a
                        thread (the threads a thread creates inherit its MXCSR on Linux)
    framework-default   nothing changed: each framework as it ships

`apply(policy)` runs in the shared code: first in `dlbench.protocol.main` (before the backend is
imported) and at the start of `run_process` (data-parallel ranks started by spawn are new
interpreters). It writes MXCSR through glibc's fenv interface: fegetenv, FTZ and DAZ set in the
saved MXCSR, fesetenv. (glibc has no FE_DFL_DISABLE_SSE_DENORMS_ENV, macOS's special pointer:
passing (const fenv_t *) -3 to glibc's fesetenv dereferences it and crashes.) On a machine that
is not x86-64 Linux the policy is recorded as "unsupported" and nothing changes.

`measure(policy, backend)` is what the record holds: the bits read back in the calling thread,
a numpy probe in a thread started afterwards, and the framework's own probe, run in its own
worker threads (`backend.flushes_denormals()`).

    python -m dlbench.numerics --framework pytorch --policy flush

applies the policy as the protocol does, sets the framework up on the CPU and prints the
measurement as JSON (tests/test_numerics.py runs it in every framework's environment).

cuDNN's autotuning (`CUDNN_AUTOTUNE`) is the other policy the same for every framework: where it
is on, each convolution's algorithm is timed on its first call and the fastest kept (the first
steps pay the search; the steady units run the fastest kernels). Each backend's
`cudnn_autotune(on)` sets it in its framework's own terms and returns what it set, which the
record keeps (`cudnn_autotune`).
"""
import argparse
import ctypes
import ctypes.util
import importlib
import json
import os
import platform
import sys
import threading

import numpy as np

POLICIES = ("flush", "framework-default")
FTZ = 0x8000            # MXCSR bit 15: a result that would be denormal is zero
DAZ = 0x0040            # MXCSR bit 6: a denormal input is read as zero
FENV_BYTES = 32         # sizeof(fenv_t) on x86-64 glibc: the x87 environment, then __mxcsr
MXCSR_OFFSET = 28       # __mxcsr, the last 4 bytes
DENORMAL_BITS = 0x000AE398  # float32 1e-39, below the smallest normal float32 (1.18e-38)
PROBE_ELEMENTS = 2 ** 20  # large enough that a framework splits the work over its threads
# On: TensorFlow, MXNet and XLA ship with it on, and the studies' PyTorch code sets cudnn.benchmark;
# PyTorch and Chainer are switched on. Inputs have fixed shapes, so one search serves every step.
CUDNN_AUTOTUNE = True
XLA_AUTOTUNE_FLAG = "--xla_gpu_autotune_level"
XLA_AUTOTUNE_LEVELS = {True: 4, False: 0}  # XLA's default level, and off


def _libm():
    """glibc's libm (fegetenv, fesetenv) on x86-64 Linux; None elsewhere."""
    if not sys.platform.startswith("linux") or platform.machine() not in ("x86_64", "AMD64"):
        return None
    try:
        return ctypes.CDLL("libm.so.6")
    except OSError:
        name = ctypes.util.find_library("m")
        return ctypes.CDLL(name) if name else None


def supported():
    return _libm() is not None


def mode_of(policy):
    """What `apply(policy)` does here: flush, framework-default, or unsupported (flush asked
    for on a machine whose floating-point control this module cannot set)."""
    if policy not in POLICIES:
        raise ValueError(f"numerics policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    if policy == "flush" and not supported():
        return "unsupported"
    return policy


def _environment():
    libm = _libm()
    env = ctypes.create_string_buffer(FENV_BYTES)
    if libm.fegetenv(env) != 0:
        raise OSError("fegetenv failed")
    return libm, env


def mxcsr():
    """The calling thread's MXCSR, None where there is none to read."""
    if not supported():
        return None
    _, env = _environment()
    return int.from_bytes(env.raw[MXCSR_OFFSET:MXCSR_OFFSET + 4], "little")


def apply(policy):
    """Set the policy in the calling thread (idempotent); returns the mode (`mode_of`)."""
    mode = mode_of(policy)
    if mode != "flush":
        return mode
    libm, env = _environment()
    bits = int.from_bytes(env.raw[MXCSR_OFFSET:MXCSR_OFFSET + 4], "little") | FTZ | DAZ
    ctypes.memmove(ctypes.addressof(env) + MXCSR_OFFSET, bits.to_bytes(4, "little"), 4)
    if libm.fesetenv(env) != 0 or (mxcsr() & (FTZ | DAZ)) != FTZ | DAZ:
        raise OSError(f"could not set FTZ and DAZ in MXCSR (it reads {mxcsr():#06x})")
    return mode


def denormals(n=PROBE_ELEMENTS):
    """n float32 denormals, made from their bits: converting 1e-39 to float32 would itself be
    flushed under FTZ, and the probe would multiply zeros."""
    return np.full(n, DENORMAL_BITS, np.uint32).view(np.float32)


def flushed(products):
    """Whether a probe's products (denormals times one) all came out zero."""
    return bool((np.asarray(products) == 0).all())


def numpy_thread_flushes():
    """Denormals times one in numpy, in a Python thread started now (it inherits the policy)."""
    outcome = {}

    def probe():
        outcome["flushes"] = flushed(denormals(1024) * np.ones(1024, np.float32))

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join()
    return outcome["flushes"]


def measure(policy, backend):
    """The record's `numerics`: the policy, what was done, and what is measured in this process."""
    bits = mxcsr()
    return {
        "policy": policy,
        "mode": mode_of(policy),
        "mxcsr": None if bits is None else f"{bits:#06x}",
        "mxcsr_ftz": None if bits is None else bool(bits & FTZ),
        "mxcsr_daz": None if bits is None else bool(bits & DAZ),
        "numpy_thread_flushes": numpy_thread_flushes(),
        "framework_flushes": backend.flushes_denormals(),
    }


def xla_flags_with_autotune(flags, on):
    """XLA_FLAGS (`flags`) with XLA's GPU autotuning level of the policy, other flags kept: XLA
    (JAX, TensorFlow's jit_compile) picks its convolution and GEMM kernels by this flag."""
    kept = [flag for flag in flags.split() if not flag.startswith(XLA_AUTOTUNE_FLAG + "=")]
    return " ".join([*kept, f"{XLA_AUTOTUNE_FLAG}={XLA_AUTOTUNE_LEVELS[on]}"])


def cudnn_autotune(backend):
    """The record's `cudnn_autotune`: the policy and what the framework's backend set for it."""
    return {"policy": "on" if CUDNN_AUTOTUNE else "off", "settings": backend.cudnn_autotune(CUDNN_AUTOTUNE)}


def probe_spec(framework, policy, threads):
    """A one-device CPU spec for setting a framework up without a workload (the probe's)."""
    from dlbench.specs import Convergence, Measure, Run

    measure = Measure(min_unit_seconds=0, min_unit_steps=1, max_unit_steps=1, warmup_tolerance=0.1,
                      max_warmup_units=1, steady_units=1)
    return Run(workload="probe", framework=framework, run_id="probe", repeat=1, seed=0, device="cpu", devices=1, nodes=1,
               strategy="single", mode=None, batch=1, threads=threads, measure=measure, convergence=Convergence(0, 1),
               timeout_s=60.0, numerics=policy)


def main():
    parser = argparse.ArgumentParser(description="Apply a numerics policy as the training process does and print "
                                                 "what is measured (JSON).")
    parser.add_argument("--framework", required=True)
    parser.add_argument("--policy", choices=POLICIES, required=True)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    spec = probe_spec(args.framework, args.policy, args.threads)
    from dlbench.frameworks import backend_module

    apply(spec.numerics)  # as dlbench.protocol.main: before the backend is imported
    backend = importlib.import_module(backend_module(args.framework))
    if hasattr(backend, "configure"):
        backend.configure(spec)
    placement = backend.setup(spec, "cpu", 0)
    print(json.dumps({"framework": args.framework, **measure(spec.numerics, backend)}), flush=True)
    backend.teardown(placement)
    sys.stderr.flush()
    os._exit(0)  # as the protocol: frameworks may leave non-daemon threads behind


if __name__ == "__main__":
    main()
