"""Process hygiene of a run: nothing outlives the workflow that started it.

Linux only (prctl); elsewhere the functions do nothing and the harness's own signal
handling remains.
"""
import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
# Between the harness and the training process it starts (dlbench.protocol): the folder of the
# run's spec and results, and the environment variable of time.time() when the harness started it
TEMPORARY_PREFIX = ".dlbench-"
STARTED = "DLBENCH_STARTED"

try:
    _libc = ctypes.CDLL(None, use_errno=True)
except OSError:  # not a libc the loader knows
    _libc = None


def die_with_parent(sig=signal.SIGTERM):
    """Ask the kernel to send `sig` to this process when its parent ends (the parent thread,
    strictly). Returns False if the parent had already gone."""
    parent = os.getppid()
    if _libc is not None and hasattr(_libc, "prctl"):
        _libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    return os.getppid() == parent


def kill_group(pgid):
    """SIGKILL every process of a process group; quiet when it is already empty."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def end_process(code=0):
    """End this process once its results are written, without the interpreter's finalization,
    which a framework's leftovers can trip: TensorFlow's non-daemon gRPC threads hang it, and a
    PyTorch DDP rank aborted in it in 3 of 128 smoke-sized runs ("terminate called without an active
    exception": a C++ thread still joinable when the library's statics were destroyed)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
