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


VMSTAT = "/proc/vmstat"


def oom_kills():
    """How many processes the kernel's out-of-memory killer has killed since boot (VMSTAT's oom_kill,
    Linux 4.13 and later); None where it cannot be read."""
    try:
        with open(VMSTAT) as f:
            for line in f:
                name, _, value = line.partition(" ")
                if name == "oom_kill":
                    return int(value)
    except (OSError, ValueError):
        pass
    return None


def kill_cause(code, oom_before, oom_after, peak_bytes, total_bytes):
    """Why a process that a signal ended (exit code -N) ended, in a line for its record: the kernel's
    out-of-memory killer where its count of kills rose meanwhile, else the signal, from outside;
    with the process tree's peak memory against the machine's."""
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    memory = (f"its processes' peak PSS {peak_bytes / 2 ** 20:,.0f} MiB" if peak_bytes else "its peak memory unknown") \
        + f" of the machine's {total_bytes / 2 ** 20:,.0f} MiB"
    if None not in (oom_before, oom_after) and oom_after > oom_before:
        return f"killed: out of memory, by the kernel's OOM killer ({name}; {memory})"
    return f"killed: by {name} from outside the run ({memory}; the kernel's OOM killer counted no kill meanwhile)" \
        if oom_before is not None else f"killed: by {name} from outside the run ({memory})"
