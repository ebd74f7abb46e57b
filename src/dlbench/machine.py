"""The machine and software a run ran on: its CPU (model, flags), GPUs, huge pages, packages
and interpreter, as every run record holds them (dlbench.record) and the frameworks read them."""
import importlib.metadata
import os
import platform
import socket
import subprocess
from pathlib import Path

from dlbench.envs import running_interpreter

REPO = Path(__file__).resolve().parents[2]
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                    "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "MXNET_CPU_WORKER_NTHREADS")


def _command(*args):
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=20, cwd=REPO)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def cpu_model():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


# The instruction-set extensions that decide which kernels the frameworks run (/proc/cpuinfo's names).
DECISIVE_FLAGS = ("avx", "avx2", "fma", "f16c", "avx512f", "avx512dq", "avx512bw", "avx512vl", "avx512cd",
                  "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx512ifma", "avx512vbmi", "avx_vnni", "amx_tile",
                  "amx_bf16", "amx_int8")


def _number(text):
    return int(text) if text is not None and text.isdigit() else text


def cpu():
    """The CPU exactly, from the first processor of /proc/cpuinfo: vendor, family, model,
    stepping, model name, microcode, and the decisive instruction-set flags it has (None where
    the machine does not say, e.g. on ARM, where these fields have other names)."""
    try:
        first = Path("/proc/cpuinfo").read_text().split("\n\n")[0]
    except OSError:
        first = ""
    fields = {}
    for line in first.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    flags = set(fields.get("flags", "").split())
    return {"vendor": fields.get("vendor_id"), "family": _number(fields.get("cpu family")),
            "model": _number(fields.get("model")), "stepping": _number(fields.get("stepping")),
            "model_name": fields.get("model name") or platform.processor() or None,
            "microcode": fields.get("microcode"), "flags": [flag for flag in DECISIVE_FLAGS if flag in flags]}


def cpu_line(cpu):
    """'<vendor> family F model M stepping S <model name>': a record's environment.cpu in one string."""
    return " ".join(str(part) for part in (cpu.get("vendor"), "family", cpu.get("family"), "model", cpu.get("model"),
                                           "stepping", cpu.get("stepping"), cpu.get("model_name")))


def gpus():
    """GPU model and driver from nvidia-smi; an empty list where there is none."""
    out = _command("nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader")
    if not out:
        return []
    rows = [line.split(", ") for line in out.splitlines()]
    return [{"name": r[0], "driver": r[1], "memory": r[2]} for r in rows if len(r) == 3]


def packages():
    """The resolved package list of this interpreter's environment, {distribution: version}:
    what `pip freeze` says, read from the installed distributions' metadata."""
    found = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found[name.lower()] = dist.version
    return dict(sorted(found.items()))


TRANSPARENT_HUGE_PAGES = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def huge_pages():
    """The kernel's transparent huge page mode (always, madvise or never; None where it does not say).
    It decides what a page fault costs a framework whose allocator gives memory back every step
    (docs/fairness.md, "What makes two processes differ"): under `always` such a framework faults 2 MiB at a
    time, under `madvise` 4 KiB unless it asks."""
    try:
        text = TRANSPARENT_HUGE_PAGES.read_text()
    except OSError:
        return None
    chosen = [word[1:-1] for word in text.split() if word.startswith("[")]
    return chosen[0] if chosen else None


def environment():
    """The machine and software a run ran on (framework versions are added by the framework)."""
    commit = _command("git", "rev-parse", "HEAD")
    dirty = _command("git", "status", "--porcelain", "--untracked-files=no")
    return {
        "hostname": socket.gethostname(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "cpu_model": cpu_model(),
        "cpu": cpu(),
        "cpu_count": os.cpu_count(),
        "cpus": sorted(os.sched_getaffinity(0)),  # those it may run on (a duet's side: its half)
        "huge_pages": huge_pages(),
        "gpus": gpus(),
        "git_commit": commit,
        "git_dirty": bool(dirty) if commit else None,
        "thread_variables": {k: os.environ[k] for k in THREAD_VARIABLES if k in os.environ},
        "packages": packages(),
        # a venv built from the env file, a conda env, or the user's own (config interpreters)
        "interpreter": running_interpreter(),
    }
