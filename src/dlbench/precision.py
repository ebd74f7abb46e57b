"""One precision policy for every framework, and the proof of what ran (pure: no framework).

A run's `precision` is a point of its workload's grid (config <workload>.precisions):

    float32          every run's precision before this dimension: weights, state and compute in float32
    mixed-bfloat16   float32 weights and optimizer state, the model's matrix products and
                     convolutions in bfloat16; no loss scaling (bfloat16 has float32's range)
    mixed-float16    the same in float16, with dynamic loss scaling (float16's range is small)

Each framework applies a policy in its own idiom (its workload modules: PyTorch's autocast and
GradScaler, Keras' dtype policies and LossScaleOptimizer, Flax module dtypes with float32
parameters, MXNet's AMP, TensorFlow's Keras policy in its own loop). A point a framework cannot
follow is `not applicable`, with the reason: Chainer has no bfloat16; MXNet's AMP computes float16
on GPUs only; a CPU without the 16-bit type's arithmetic (`hardware_reason`: the CPU flags of
HARDWARE_FLAGS) runs none of that type's points, in every framework alike.

The proof, in every run's record (`precision`): before its first block, the first process runs one
forward pass of its model on a batch of the run's size (the task's `precision_inputs`: no more
memory than a training step's) under the policy, and the framework part lists the model's compute
operations as they ran (`precision_ops`: convolutions, matrix products, recurrent cells; each with
the dtype its operands were multiplied in and its FLOPs, from the framework's own record of what
ran: PyTorch's dispatched aten ops, the compiled HLO of XLA, TensorFlow's graph, MXNet's operator
outputs). `summary` turns the list into the record: the share of the FLOPs in each dtype, the
precision that measures, and whether it is the policy's (`followed`). A run whose policy was not
followed is flagged in the tables, and no verdict rests on it.
"""
from pathlib import Path

POLICIES = ("float32", "mixed-bfloat16", "mixed-float16")
DEFAULT = "float32"
COMPUTE_DTYPE = {"float32": "float32", "mixed-bfloat16": "bfloat16", "mixed-float16": "float16"}
LOSS_SCALING = {"float32": False, "mixed-bfloat16": False, "mixed-float16": True}
SIXTEEN_BITS = ("bfloat16", "float16")
# The CPU flags of a 16-bit type's arithmetic (Linux /proc/cpuinfo): AVX-512 BF16 (Cooper Lake, Zen 4 on)
# and AMX (Sapphire Rapids on); AVX-512 FP16 (Sapphire Rapids on) and AMX-FP16 (Granite Rapids). Without
# them a framework converts each 16-bit value to float32 and back around float32 arithmetic.
HARDWARE_FLAGS = {"bfloat16": ("avx512_bf16", "amx_bf16"), "float16": ("avx512_fp16", "amx_fp16")}
# A measured precision is the 16-bit type that holds at least this share of the model's compute
# FLOPs (else float32): a policy sends the products and convolutions to 16 bits, which are nearly all
# of a model's FLOPs; MXNet's AMP keeping the LSTM in float32 leaves IMDB's model mostly in float32.
MEASURED_SHARE = 0.5
# A positive control of the proof: NAME=1 in a variant's environment (config variants), and every framework
# part applies float32 whatever the spec requests (`applied`); the record's check must catch it.
PLANTED_MISMATCH = "DLBENCH_PLANTED_PRECISION_MISMATCH"


def applied(spec):
    """The policy the framework part applies: the spec's, or float32 under a planted mismatch."""
    values = dict(item.split("=", 1) for item in spec.environment)
    if values.get(PLANTED_MISMATCH, "0") not in ("0", "1"):
        raise ValueError(f"{PLANTED_MISMATCH}={values[PLANTED_MISMATCH]}: 1 (plant the mismatch) or 0")
    return DEFAULT if values.get(PLANTED_MISMATCH) == "1" else spec.precision


def cpu_flags(cpuinfo="/proc/cpuinfo"):
    """The CPU's flags (the first processor's), empty where there is no /proc/cpuinfo."""
    path = Path(cpuinfo)
    if not path.exists():
        return set()
    for line in path.read_text().splitlines():
        if line.startswith(("flags", "Features")):
            return set(line.split(":", 1)[1].split())
    return set()


def hardware_reason(policy, device_kind, flags=None):
    """Why this device cannot run the policy's 16-bit type in hardware (None: it can, or float32).
    On a GPU the framework's own check decides (its build knows the GPU)."""
    dtype = COMPUTE_DTYPE[policy]
    if dtype not in HARDWARE_FLAGS or device_kind != "cpu":
        return None
    flags = cpu_flags() if flags is None else flags
    if flags & set(HARDWARE_FLAGS[dtype]):
        return None
    return (f"precision {policy}: this CPU has no {dtype} arithmetic (none of the flags "
            f"{', '.join(HARDWARE_FLAGS[dtype])} in /proc/cpuinfo), so every framework would emulate it in float32")


def op(name, dtype, flops):
    """One compute operation of a forward pass as a framework part lists it: its name (the
    framework's: aten.convolution, convolution, Conv2D), the dtype its operands were multiplied in,
    its FLOPs (two per multiply-add)."""
    return {"op": str(name), "dtype": str(dtype), "flops": float(flops)}


def summary(policy, ops, loss_scaling):
    """The record's `precision`: what was requested, the share of the forward pass's compute FLOPs in
    each dtype (`ops`, the framework's list), the precision that measures, whether it is the policy's,
    and whether the loss is scaled (the framework's say: a LossScaleOptimizer, a GradScaler)."""
    if policy not in POLICIES:
        raise ValueError(f"precision must be one of {', '.join(POLICIES)}, got {policy!r}")
    total = sum(o["flops"] for o in ops)
    shares = {}
    for o in ops:
        shares[o["dtype"]] = shares.get(o["dtype"], 0.0) + (o["flops"] / total if total else 0.0)
    sixteen = {dtype: shares.get(dtype, 0.0) for dtype in SIXTEEN_BITS}
    measured_dtype = next((d for d in SIXTEEN_BITS if sixteen[d] >= MEASURED_SHARE), "float32")
    measured = next(p for p, d in COMPUTE_DTYPE.items() if d == measured_dtype)
    return {"requested": policy, "compute_dtype": COMPUTE_DTYPE[policy], "measured": measured,
            "share_16bit": sum(sixteen.values()), "shares": dict(sorted(shares.items())), "ops": len(ops),
            "forward_flops": total, "loss_scaling": bool(loss_scaling),
            # no compute op seen: nothing measured, nothing followed
            "followed": bool(ops) and measured == policy and bool(loss_scaling) == LOSS_SCALING[policy]}


def measure(spec, workload):
    """The record's `precision` of a built workload (the first process, outside every clock)."""
    ops, loss_scaling = workload.precision_ops(workload.precision_inputs())
    return summary(spec.precision, ops, loss_scaling)
