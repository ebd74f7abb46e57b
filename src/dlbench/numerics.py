"""One numerics policy for every framework: denormal floats flushed to zero, or not touched.

TensorFlow and XLA (JAX, Keras on TensorFlow and on JAX) set the CPU's flush-to-zero (FTZ)
and denormals-are-zero (DAZ) modes in the threads that run their kernels; PyTorch and MXNet
do not. Arithmetic on denormals is many times slower on x86 CPUs, so without one policy a
ratio of two frameworks also compares two numerics modes (a PyTorch LSTM step measured at
about half the cost with flushing).

    flush               FTZ and DAZ set in the training process before any framework starts a
                        thread (the threads a thread creates inherit its MXCSR on Linux)
    framework-default   nothing changed: each framework as it ships

`apply(policy)` runs in the shared code: first in `dlbench.protocol.main` (before the adapter is
imported) and at the start of `run_process` (data-parallel ranks started by spawn are new
interpreters). It writes MXCSR through glibc's fenv interface: fegetenv, FTZ and DAZ set in the
saved MXCSR, fesetenv. (glibc has no FE_DFL_DISABLE_SSE_DENORMS_ENV, macOS's special pointer:
passing (const fenv_t *) -3 to glibc's fesetenv dereferences it and crashes.) On a machine that
is not x86-64 Linux the policy is recorded as "unsupported" and nothing changes.

`measure(policy, adapter)` is what the record holds: the bits read back in the calling thread,
a numpy probe in a thread started afterwards, and the framework's own probe, run in its own
worker threads (`adapter.flushes_denormals()`).

    python -m dlbench.numerics_probe --framework pytorch --policy flush [--gpu-float32 tf32]

applies the policies as the protocol does, sets the framework up on the CPU and prints the
measurement as JSON (tests/test_numerics.py runs it in every framework's environment); it stands
above the frameworks' adapters, which import this module.

cuDNN's autotuning (`CUDNN_AUTOTUNE`) is the other policy the same for every framework: where it
is on, each convolution's algorithm is timed on its first call and the fastest kept (the first
steps pay the search; the steady units run the fastest kernels). Each adapter's
`cudnn_autotune(on)` sets it in its framework's own terms and returns what it set, which the
record keeps (`cudnn_autotune`).

Float32 on GPUs (`numerics.gpu_float32`) is the GPU's denormal question: NVIDIA GPUs since Ampere
can compute float32 matrix products and convolutions in TF32 (inputs rounded to 10 significand
bits, float32 accumulation), and the frameworks ship with different choices (PyTorch: TF32 in
cuDNN's convolutions, not in matmuls; TensorFlow and XLA: both). One policy for every framework:

    highest   every float32 product in full float32 (the default: the same math everywhere)
    tf32      TF32 allowed in matrix products and convolutions, in every framework

Each adapter's `gpu_float32(policy)` sets it in its framework's own terms (before the framework
starts, idempotent, as cudnn_autotune) and returns what it reads back. `float32_product` then
measures it: a float32 matrix product computed by the framework on the run's device, checked
against float64 (`product_precision`: the median relative error tells float32 from TF32 from
less). The record's `numerics.gpu_float32` holds the policy, the settings, the measured precision
and whether it is the policy's (`followed`). On a CPU the products are float32 whatever the
policy: the settings are still applied and recorded, and `followed` is null.
"""
import ctypes
import ctypes.util
import platform
import sys
import threading

import numpy as np

from dlbench import allocator

POLICIES = ("flush", "framework-default")
GPU_FLOAT32 = ("highest", "tf32")
# The precision of a float32 product on a GPU under each policy (product_precision's words).
GPU_FLOAT32_PRECISION = {"highest": "float32", "tf32": "tf32"}
# A [256 x 64] x [64 x 256] product of uniform [0, 1) float32s (no cancellation: every relative
# error is small and meaningful). Its median relative error against float64, numpy on this CPU:
# 7e-8 in float32; with the inputs rounded as TF32 rounds them (10 significand bits) 2.8e-5,
# as bfloat16 (7 bits) 2.4e-4. The bounds are the decades between them.
PRODUCT_SHAPE = (256, 64, 256)
PRECISION_BOUNDS = (("float32", 1e-6), ("tf32", 1e-4))
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


def applied(policy):
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
    """Set the policy in the calling thread (idempotent); returns what it did (`applied`)."""
    done = applied(policy)
    if done != "flush":
        return done
    libm, env = _environment()
    bits = int.from_bytes(env.raw[MXCSR_OFFSET:MXCSR_OFFSET + 4], "little") | FTZ | DAZ
    ctypes.memmove(ctypes.addressof(env) + MXCSR_OFFSET, bits.to_bytes(4, "little"), 4)
    if libm.fesetenv(env) != 0 or (mxcsr() & (FTZ | DAZ)) != FTZ | DAZ:
        raise OSError(f"could not set FTZ and DAZ in MXCSR (it reads {mxcsr():#06x})")
    return done


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


def product_operands(seed=0):
    """The two float32 matrices of the precision probe (PRODUCT_SHAPE)."""
    rng = np.random.default_rng(seed)
    rows, inner, columns = PRODUCT_SHAPE
    return rng.random((rows, inner), dtype=np.float32), rng.random((inner, columns), dtype=np.float32)


def product_precision(a, b, product):
    """{median_relative_error, precision} of a float32 product of a and b: precision is float32,
    tf32 or lower (PRECISION_BOUNDS), from the error against the product in float64."""
    exact = a.astype(np.float64) @ b.astype(np.float64)
    error = float(np.median(np.abs(np.asarray(product, np.float64) - exact) / exact))
    precision = next((name for name, bound in PRECISION_BOUNDS if error < bound), "lower")
    return {"median_relative_error": error, "precision": precision}


def gpu_float32_record(policy, settings, adapter, placement):
    """The record's `numerics.gpu_float32`: the policy, what the adapter set for it (`settings`,
    its gpu_float32's return), and the precision of a float32 product on the run's device.
    `followed`: whether that is the policy's precision (null on a CPU, where no policy applies)."""
    if policy not in GPU_FLOAT32:
        raise ValueError(f"gpu_float32 must be one of {', '.join(GPU_FLOAT32)}, got {policy!r}")
    a, b = product_operands()
    measured = product_precision(a, b, adapter.float32_product(a, b, placement))
    gpu = placement.device_kind == "gpu"
    return {"policy": policy, "settings": settings, "device_kind": placement.device_kind, **measured,
            "followed": measured["precision"] == GPU_FLOAT32_PRECISION[policy] if gpu else None}


def measure(spec, adapter, placement, gpu_float32_settings):
    """The record's `numerics`: the policies, what was done, and what is measured in this process."""
    policy = spec.numerics
    bits = mxcsr()
    return {
        "policy": policy,
        "applied": applied(policy),
        "mxcsr": None if bits is None else f"{bits:#06x}",
        "mxcsr_ftz": None if bits is None else bool(bits & FTZ),
        "mxcsr_daz": None if bits is None else bool(bits & DAZ),
        "numpy_thread_flushes": numpy_thread_flushes(),
        "framework_flushes": adapter.flushes_denormals(),
        "gpu_float32": gpu_float32_record(spec.gpu_float32, gpu_float32_settings, adapter, placement),
        "allocator": allocator.measured(spec.allocator),
    }


def xla_flags_with_autotune(flags, on):
    """XLA_FLAGS (`flags`) with XLA's GPU autotuning level of the policy, other flags kept: XLA
    (JAX, TensorFlow's jit_compile) picks its convolution and GEMM kernels by this flag."""
    kept = [flag for flag in flags.split() if not flag.startswith(XLA_AUTOTUNE_FLAG + "=")]
    return " ".join([*kept, f"{XLA_AUTOTUNE_FLAG}={XLA_AUTOTUNE_LEVELS[on]}"])


def cudnn_autotune(adapter):
    """The record's `cudnn_autotune`: the policy and what the framework's adapter set for it."""
    return {"policy": "on" if CUDNN_AUTOTUNE else "off", "settings": adapter.cudnn_autotune(CUDNN_AUTOTUNE)}
