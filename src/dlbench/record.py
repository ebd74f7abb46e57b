"""What every run record holds besides its measurements: environment and summary."""
import importlib.metadata
import json
import os
import platform
import resource
import socket
import subprocess
from pathlib import Path

import numpy as np

from dlbench.envs import running_interpreter

REPO = Path(__file__).resolve().parents[2]
RECORD_VERSION = 12
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
    (README, "What makes two processes differ"): under `always` such a framework faults 2 MiB at a
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
        "huge_pages": huge_pages(),
        "gpus": gpus(),
        "git_commit": commit,
        "git_dirty": bool(dirty) if commit else None,
        "thread_variables": {k: os.environ[k] for k in THREAD_VARIABLES if k in os.environ},
        "packages": packages(),
        # a venv built from the env file, a conda env, or the user's own (config interpreters)
        "interpreter": running_interpreter(),
    }


def contended_unit(usage, wall_s, max_other_cpus):
    """Whether other processes used more than `max_other_cpus` cores on average during a unit of
    wall_s seconds (usage: a unit's `machine`, dlbench.machine.CpuMeter.usage): it timed them as well as the run."""
    other = usage.get("other_cpu_s")
    return other is not None and other / wall_s > max_other_cpus


def peak_rss_bytes():
    """Peak resident memory of this process (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def summarise(segments, units):
    """The steady units (the measurement) apart from calibration and warm-up: how many, their
    steps, their median time, seconds per step and throughput; the first convergence segment;
    compilation; the last loss and metric.

    Compilation (`compile_s`) is what the blocks before the first steady unit took beyond the
    same steps at the steady seconds per step (a block's time leaves out its evaluation, timed
    apart): tracing, compiling,
    autotuning and allocator growth, measured the same way in every framework and mode. It is
    a difference of two timings, so near 0 it is noise, and may be below 0."""
    steady = [u for u in units if u["kind"] == "steady"]
    blocks = segments + units
    per_step = float(np.median([u["wall_s"] / u["steps"] for u in steady])) if steady else None
    # a contended unit timed the machine's other processes too: it is neither step nor compiling
    before = [b for b in blocks[:blocks.index(steady[0])] if b["kind"] != "contended"] if steady else []
    return {
        "first_segment_s": segments[0]["wall_s"] if segments else None,
        "compile_s": sum(b["wall_s"] - b["steps"] * per_step for b in before) if steady else None,
        "steady_units": len(steady),
        "steady_steps": sum(u["steps"] for u in steady),
        "steady_unit_s": float(np.median([u["wall_s"] for u in steady])) if steady else None,
        "seconds_per_step": per_step,
        "samples_per_s": float(np.median([u["samples"] / u["wall_s"] for u in steady])) if steady else None,
        "final_loss": blocks[-1]["loss"] if blocks else None,
        "final_metric": segments[-1]["metric"] if segments else None,
    }


# What a training process reports besides its blocks (dlbench.protocol.run_process).
KNOWN_RESULT_KEYS = {"status", "reason", "segments", "units", "plan", "train_samples", "initial_weights",
                     "framework_version", "library_version", "framework_cpu", "devices_used", "threads", "parameters", "numerics",
                     "cudnn_autotune", "compile_cache", "startup", "final", "final_eval_s", "gpu_allocator_peak", "nodes", "order_sha256",
                     "private_api_overrides"}


def peak_memory(result, utilisation):
    """Peak memory, measured by the harness the same way for every framework: the largest
    sampled PSS of the run's whole process tree (loader workers included, shared pages once)
    and, where there are GPUs, the largest sampled GPU memory of its processes (NVML);
    besides, each framework's own allocator peak under its own name (they measure different
    things and are not compared)."""
    samples = utilisation or {}
    return {"peak_pss_bytes": max(samples.get("pss_bytes") or [0]) or None,
            # each node's training processes (ru_maxrss): beside srun, the sampled tree is this node's only
            "node_peak_rss_bytes": [node.get("peak_rss_bytes") for node in result.get("nodes") or []],
            "gpu_process_peak_bytes": max(samples.get("gpu_process_bytes") or [0]) or None,
            "gpu_allocator_peak": result.get("gpu_allocator_peak") or {}}


def make_record(spec, point, result, code, stderr_tail, started, wall_s, utilisation=None, attempt="first"):
    """The run record (schemas/run.schema.json) from what the training process left.

    `point` is the run's sweep point ({key: value}, the run id's fields); `result` is what
    the process wrote (None if nothing); `code` its exit code (None if killed at the
    timeout); a run that did not end cleanly with status ok or not_applicable is failed,
    with the end of its error output.
    """
    result = {"segments": [], "units": [], **(result or {})}
    status = result.get("status")
    if code != 0 or status not in ("ok", "not_applicable"):
        reason = "timed out" if code is None else f"exit code {code}"
        error = f"training process failed ({reason})\n" + "\n".join(stderr_tail)
        status = "failed"
    else:
        error = result.get("reason")
    env = environment()
    env["framework_version"] = result.get("framework_version")
    env["library_version"] = result.get("library_version")  # of the image library a run of no framework times
    env["framework_cpu"] = result.get("framework_cpu")  # what the framework says it uses on the CPU
    # private API run on a version it was not written for (config private_api_override): never silent
    env["private_api_overrides"] = result.get("private_api_overrides") or []
    return {
        "record_version": RECORD_VERSION,
        "workload": spec["workload"],
        "framework": spec["framework"],
        "run_id": spec["run_id"],
        "point": point,
        "status": status,
        "error": error,
        "spec": spec,
        "environment": env,
        "devices_used": result.get("devices_used"),
        "nodes": [{k: node.get(k) for k in ("rank", "hostname")} for node in result.get("nodes") or []],
        "threads": result.get("threads"),
        "numerics": result.get("numerics"),  # dlbench.numerics.measure, from the training process
        "cudnn_autotune": result.get("cudnn_autotune"),  # dlbench.numerics.cudnn_autotune, from the training process
        "startup": result.get("startup"),  # dlbench.protocol.startup_seconds: before the first block, step by step
        "compile_cache": result.get("compile_cache"),  # dlbench.protocol.compile_cache_folder: cold or warm, its files
        "parameters": result.get("parameters"),
        "train_samples": result.get("train_samples"),
        "order_sha256": result.get("order_sha256"),  # of the run's global index batches (dlbench.clock.run_order)
        "initial_weights": result.get("initial_weights"),
        "segments": result["segments"],
        "units": result["units"],
        "plan": result.get("plan"),
        "summary": summarise(result["segments"], result["units"]),
        "final": result.get("final") or {},
        "final_eval_s": result.get("final_eval_s"),
        "memory": peak_memory(result, utilisation),
        "extra": {k: v for k, v in result.items() if k not in KNOWN_RESULT_KEYS},
        "utilisation": utilisation,
        "started_at": started,
        "wall_s": wall_s,
        "attempt": attempt,
    }


def write_json(path, data):
    """Write atomically, so a reader never sees half a record."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def read_record(path):
    """A record on disk as a dict, None if there is none (or it cannot be read)."""
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None
