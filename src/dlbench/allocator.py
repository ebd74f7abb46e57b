"""One heap-allocator policy for every training process, like the denormals policy.

glibc's malloc moves its mmap threshold up as a process frees large blocks, and trims the top of
its heap when enough is free: whether a step's activations come from reused heap or from pages
the kernel maps (and faults in) anew then depends on what the process allocated and freed
before. PyTorch's MNIST processes faulted 8,700 to 18,600 pages a step from one run to the next,
and their throughput followed it (issue 53). With both thresholds fixed high, large blocks stay
on the heap and are reused. The policy is the same request to every process; frameworks that
allocate from pools of their own (TensorFlow's, MXNet's, XLA's) may see little of it.

The harness sets it in the training process's environment before the process starts (glibc
reads GLIBC_TUNABLES once, at start-up); the process records what it ran under (`measured`).
"""
import os

POLICIES = ("fixed", "framework-default")
# 4 GiB: above any block a step of these workloads allocates (glibc 2.36 accepts it)
FIXED_TUNABLES = "glibc.malloc.mmap_threshold=4294967296:glibc.malloc.trim_threshold=4294967296"
TUNABLES = "GLIBC_TUNABLES"


def process_environment(spec, environ=os.environ):
    """The variables a run's training process gets on top of the harness's own: its variant's
    (spec environment, NAME=value) and, under the fixed policy, glibc's thresholds added to any
    tunables already set (framework-default: malloc as it ships, the environment untouched)."""
    env = dict(item.split("=", 1) for item in spec["environment"])
    if spec["allocator"] == "fixed":
        env[TUNABLES] = ":".join(filter(None, [env.get(TUNABLES, environ.get(TUNABLES)), FIXED_TUNABLES]))
    return env


def measured(policy):
    """The record's numerics.allocator: the policy and the tunables this process started with."""
    return {"policy": policy, "glibc_tunables": os.environ.get(TUNABLES)}
