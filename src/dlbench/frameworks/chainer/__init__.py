"""Chainer's adapter: devices, processes, threads and the sync (the contract: dlbench.contract).
What the Chainer workload modules share is beside it: the optimizer and the step (step.py),
chainer.iterators over the run's order (loaders.py).

Strategies: "none" (one process, one device) and "chainermn" (data parallel over N MPI
processes, one device each: `launch` runs `mpiexec -n N` of `dlbench.frameworks.chainer.ranks`,
each rank calls the protocol's target with its MPI rank; ChainerMN's multi-node optimizer
averages the ranks' gradients with MPI allreduce, 'naive' communicator on CPUs, 'pure_nccl' on
GPUs). A single run never imports mpi4py, so it needs no MPI.

Chainer computes on the CPU with numpy (no iDeep in this environment): its threads are numpy's
BLAS pool, set at run time through threadpoolctl (numpy is loaded before `setup`, so the
OPENBLAS_NUM_THREADS variable would come too late); the run's threads split over the processes,
as PyTorch's DDP processes do.

Precision: float32, or mixed-float16 on GPUs as Chainer's idiom has it (`setup`: chainer.config.dtype
= chainer.mixed16: float16 links and activations, batch normalisation's float32; make_optimizer:
float32 master weights and Adam's state, use_fp32_update, and dynamic loss scaling,
optimizer.loss_scaling(); written, not run here: no GPU build). Chainer has no bfloat16
(dlbench.frameworks.NOT_APPLICABLE), and its float16 on a CPU is not applicable (`check`).
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from dlbench import precision
from dlbench.contract import Placement, verify_adapter
from dlbench.errors import FrameworkError, NotApplicable
from dlbench.frameworks import FRAMEWORKS, reported
from dlbench.frameworks.chainer import ranks  # imported so that the workflow counts it among a run's code files
from dlbench.machine import gpus
from dlbench.numerics import denormals, flushed

STRATEGIES = ("none", *FRAMEWORKS["chainer"].strategies)
RANK_MODULE = ranks.__name__  # what each MPI process runs
ARGS_FILE = "chainermn-args.json"  # beside the run's result file, in the harness's folder
STDERR_TAIL = 3000  # characters of the failed ranks' errors, and of their error output, a failed launch reports
NO_CPU_FLOAT16 = ("Chainer's mixed16 (float16) computes on a CPU with numpy, whose float16 has no oneDNN or BLAS "
                  "kernels (no iDeep for float16 either): every product would be emulated, converting to float32 "
                  "and back; Chainer's mixed16 is GPU-oriented (cuDNN and cuBLAS)")


def version():
    import chainer

    return chainer.__version__


def visible_gpus():
    """GPUs this environment's Chainer can use: none without CuPy."""
    from chainer.backends import cuda

    if not cuda.available:
        return 0
    return cuda.cupy.cuda.runtime.getDeviceCount()


def cudnn_autotune(on):
    import chainer

    chainer.global_config.autotune = on  # off as Chainer ships; with cuDNN, its convolutions then search
    return {"chainer.config.autotune": chainer.global_config.autotune}


def gpu_float32(policy):
    """CuPy's TF32 switch (CUPY_TF32, off as CuPy ships), read when CuPy loads. Chainer has no
    GPU build here (docs/environments.md, "GPUs"): on the CPU its products are numpy's, float32."""
    os.environ["CUPY_TF32"] = "1" if policy == "tf32" else "0"
    return {"CUPY_TF32": os.environ["CUPY_TF32"]}


def compile_cache(directory):
    return {}  # define-by-run: nothing compiled (CuPy's kernel cache is GPU-only, and Chainer has no GPU build here)


def float32_product(a, b, placement):
    import chainer
    import chainer.functions as F

    target = device(placement)
    return chainer.backend.CpuDevice().send(F.matmul(target.send(a), target.send(b)).array)


def check(spec, device_kind):
    if spec.strategy not in STRATEGIES:
        raise ValueError(f"unknown Chainer strategy {spec.strategy!r}, expected one of {STRATEGIES}")
    if spec.strategy == "none" and spec.devices != 1:
        raise ValueError(f"strategy none runs on one device, not {spec.devices}")
    if spec.precision == "mixed-float16" and device_kind == "cpu":
        raise NotApplicable(NO_CPU_FLOAT16)


def mpiexec():
    """The env's own mpiexec (the `mpich` wheel's, beside this interpreter: the MPI mpi4py loads), else PATH's."""
    own = Path(sys.executable).parent / "mpiexec"
    found = str(own) if own.is_file() else shutil.which("mpiexec")
    if found is None:
        raise FrameworkError(f"chainermn runs its processes with mpiexec, which is neither in {own.parent} nor on "
                             "PATH: install the env's `mpich` package (envs/chainer.yaml)")
    return found


def launch(spec, target, args):
    """target(rank, *args) here (none, or one device), or in each of N MPI processes
    (chainermn): `mpiexec -n N python -m dlbench.frameworks.chainer.ranks ARGS_FILE`. The
    target (a module-level function) and its JSON arguments go through a file beside the
    result file (args[1]); the ranks' output passes through to this process's."""
    if spec.strategy != "chainermn" or spec.devices == 1:
        target(0, *args)
        return
    args_file = Path(args[1]).resolve().parent / ARGS_FILE
    args_file.write_text(json.dumps({"target": f"{target.__module__}:{target.__qualname__}", "args": list(args)}))
    failures = [ranks.failure_file(args_file, rank) for rank in range(spec.devices)]  # in the run's own folder
    command = [mpiexec(), "-n", str(spec.devices), sys.executable, "-m", RANK_MODULE, str(args_file)]
    proc = subprocess.run(command, stderr=subprocess.PIPE, text=True, check=False)
    sys.stderr.write(proc.stderr)
    if proc.returncode != 0:
        errors = "".join(path.read_text() for path in failures if path.exists())
        raise FrameworkError(f"{' '.join(command)} exited with {proc.returncode} (the ranks' exit codes, "
                             f"as mpiexec reports them); the failed ranks' errors:\n{errors[-STDERR_TAIL:]}"
                             f"the end of their error output:\n{proc.stderr[-STDERR_TAIL:]}")


def setup(spec, device_kind, rank):
    import chainer
    from threadpoolctl import threadpool_limits

    processes = spec.devices if spec.strategy == "chainermn" else 1
    threads = max(1, spec.threads // processes)
    threadpool_limits(limits=threads, user_api="blas")  # numpy's BLAS pool, for the rest of the process
    if precision.applied(spec) == "mixed-float16":  # before the model is built: its links take their dtype from it
        chainer.global_config.dtype = chainer.mixed16
    handles = {"strategy": spec.strategy, "iterators": [], "communicator": None}
    if processes > 1:
        import chainermn

        handles["communicator"] = chainermn.create_communicator("pure_nccl" if device_kind == "gpu" else "naive")
        comm = handles["communicator"]
        if comm.size != processes or comm.rank != rank:
            raise FrameworkError(f"MPI gives rank {comm.rank} of {comm.size}, the run asked for rank {rank} of "
                                 f"{processes} processes: start chainermn runs through launch (mpiexec)")
        local = comm.intra_rank
    else:
        local = 0
    handles["device"] = chainer.get_device(f"@cupy:{local}" if device_kind == "gpu" else "@numpy")
    handles["device"].use()
    return Placement(rank=rank, processes=processes, device_kind=device_kind, local_devices=1, threads=threads,
                     handles=handles)


def device(placement):
    return placement.handles["device"]


def communicator(placement):
    """The ChainerMN communicator of a chainermn run of more than one process, else None."""
    return placement.handles["communicator"]


# --- the protocol's calls ---------------------------------------------------------------------

def barrier(placement):
    if communicator(placement) is not None:
        communicator(placement).mpi_comm.Barrier()


def sync(placement, pending):
    """On the CPU nothing is queued: Chainer's functions run numpy, which returns when the work
    is done. On a GPU, CuPy's kernels are asynchronous: wait for the device."""
    if placement.device_kind == "gpu":
        from chainer.backends import cuda

        cuda.cupy.cuda.Device().synchronize()
    barrier(placement)


def to_float(value):
    return float(value)  # a 0-d numpy (or CuPy) array: CuPy copies it to the host


def mean_over_processes(value, placement):
    comm = communicator(placement)
    if comm is None:
        return value
    from mpi4py import MPI

    return comm.mpi_comm.allreduce(float(value), op=MPI.SUM) / placement.processes


def gpu_allocator_peak(placement):
    """CuPy's memory pool keeps what it took: its used bytes at the end are its peak in use."""
    if placement.device_kind != "gpu":
        return {}
    from chainer.backends import cuda

    return {"cupy.get_default_memory_pool().used_bytes": cuda.cupy.get_default_memory_pool().used_bytes()}


def blas():
    """numpy's BLAS libraries and their threads, as threadpoolctl reads them."""
    from threadpoolctl import threadpool_info

    return [{key: pool.get(key) for key in ("internal_api", "version", "num_threads", "threading_layer",
                                            "architecture")} for pool in threadpool_info()]


def describe(placement):
    import chainer
    from chainer.backends import intel64

    gpu = placement.device_kind == "gpu"
    return {
        "devices_used": {"kind": placement.device_kind, "count": placement.processes * placement.local_devices,
                   "names": [g["name"] for g in gpus()[:placement.processes]] if gpu else []},
        "threads": {"blas_threads": placement.threads, "processes": placement.processes},
        "framework_cpu": {"numpy": np.__version__, "blas": reported(blas),
                          "ideep_available": reported(intel64.is_ideep_available),
                          "use_ideep": reported(lambda: chainer.config.use_ideep),
                          "dtype": reported(lambda: str(chainer.config.dtype))},
    }


def flushes_denormals():
    """Denormal float32s times one in Chainer's multiplication on the CPU (2**20 of them: the
    function that a Variable's * runs, numpy's multiply underneath)."""
    import chainer

    inputs = denormals()
    return flushed((chainer.Variable(inputs) * np.ones_like(inputs)).array)


def teardown(placement):
    """Stop the iterators' worker processes (the protocol ends with os._exit, which would leave
    them); then no rank leaves while another still talks to it."""
    for iterator in placement.handles["iterators"]:
        iterator.finalize()
    placement.handles["iterators"].clear()
    barrier(placement)


verify_adapter(__name__)  # the contract (dlbench.contract.Adapter), checked as this module loads
