"""The frameworks the benchmark knows: the one place they are listed.

A framework is a line here, its env file envs/<name>.yaml (the one place its versions are
written), its backend module beside this file (devices, processes, the device sync: see
dlbench.protocol), and one module per workload, dlbench/workloads/<workload>/<module>.py.
Keras 3's three frameworks share one module of each: the same Keras code, on the backend
that the env's KERAS_BACKEND chooses.
"""
from dataclasses import dataclass


@dataclass(frozen=True)
class Framework:
    module: str             # the backend's and the workload modules' name
    strategies: tuple = ()  # its data-parallel strategies for more than one device (its own engines)


FRAMEWORKS = {
    "pytorch": Framework("pytorch", ("ddp", "dp")),
    "tensorflow": Framework("tensorflow", ("mirrored", "multiworker")),
    "mxnet": Framework("mxnet", ("kvstore",)),
    "keras-tensorflow": Framework("keras", ("mirrored",)),
    "keras-jax": Framework("keras", ("data-parallel",)),
    "keras-torch": Framework("keras", ("data-parallel",)),
    "jax": Framework("jax", ("sharding",)),
}


def backend_module(framework):
    return f"dlbench.frameworks.{FRAMEWORKS[framework].module}"


def workload_module(workload, framework):
    return f"dlbench.workloads.{workload.replace('-', '_')}.{FRAMEWORKS[framework].module}"
