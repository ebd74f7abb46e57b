"""The adapter of runs of no framework (spec.framework None: the image libraries' benchmarks,
NumPy and an image library in this process and its worker processes): one process on the CPU,
nothing queued on a device, so nothing to wait for. The contract: dlbench.contract."""
import numpy as np

from dlbench.contract import Placement
from dlbench.numerics import denormals, flushed


def version():
    return None  # no framework; the library a run times reports its own (Workload.library_version)


def visible_gpus():
    return 0


def cudnn_autotune(on):
    return {}  # no cuDNN


def gpu_float32(policy):
    return {}  # no GPU


def compile_cache(directory):
    return {}  # nothing compiled


def float32_product(a, b, placement):
    return a @ b  # NumPy's, on the CPU


def check(spec, device_kind):
    pass


def launch(spec, target, args):
    target(0, *args)


def setup(spec, device_kind, rank):
    return Placement(rank=0, processes=1, device_kind=device_kind, local_devices=1, threads=spec.threads)


def barrier(placement):
    pass


def sync(placement, pending):
    pass


def to_float(value):
    return float(value)


def mean_over_processes(value, placement):
    return value


def gpu_allocator_peak(placement):
    return {}


def describe(placement):
    return {"devices_used": {"kind": placement.device_kind, "count": 1, "names": []},
            "threads": {"processes": 1, "threads": placement.threads}}


def flushes_denormals():
    """No framework's ops: NumPy's, in this thread."""
    probe = denormals()
    return flushed(probe * np.ones_like(probe))


def teardown(placement):
    pass
