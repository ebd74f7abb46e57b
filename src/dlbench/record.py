"""What every run record holds besides its measurements: its summary, peak memory and the
machine it ran on (dlbench.machine.environment); writing and reading records."""
import json
import os
import resource
import statistics
from pathlib import Path

from dlbench.machine import environment

RECORD_VERSION = 13


def contended_unit(usage, wall_s, max_other_cpus):
    """Whether other processes used more than `max_other_cpus` cores on average during a unit of
    wall_s seconds (usage: a unit's `machine`, dlbench.machine_load.CpuMeter.usage): it timed them as well as the run."""
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
    per_step = float(statistics.median([u["wall_s"] / u["steps"] for u in steady])) if steady else None
    # a contended unit timed the machine's other processes too: it is neither step nor compiling
    before = [b for b in blocks[:blocks.index(steady[0])] if b["kind"] != "contended"] if steady else []
    return {
        "first_segment_s": segments[0]["wall_s"] if segments else None,
        "compile_s": sum(b["wall_s"] - b["steps"] * per_step for b in before) if steady else None,
        "steady_units": len(steady),
        "steady_steps": sum(u["steps"] for u in steady),
        "steady_unit_s": float(statistics.median([u["wall_s"] for u in steady])) if steady else None,
        "seconds_per_step": per_step,
        "samples_per_s": float(statistics.median([u["samples"] / u["wall_s"] for u in steady])) if steady else None,
        "final_loss": blocks[-1]["loss"] if blocks else None,
        "final_metric": segments[-1]["metric"] if segments else None,
    }


# What a training process reports besides its blocks (dlbench.protocol.run_process).
KNOWN_RESULT_KEYS = {"status", "reason", "segments", "units", "plan", "train_samples", "initial_weights",
                     "framework_version", "library_version", "framework_cpu", "devices_used", "threads", "parameters", "numerics",
                     "cudnn_autotune", "precision", "compile_cache", "startup", "final", "final_eval_s", "gpu_allocator_peak", "nodes", "order_sha256",
                     "private_api_overrides"}


def peak_memory(result, utilisation):
    """Peak memory, measured by the harness the same way for every framework: the largest
    sampled PSS of the run's whole process tree (loader workers included, shared pages once)
    and, where there are GPUs, the largest sampled GPU memory of its processes (NVML);
    besides, each framework's own allocator peak under its own name (they measure different
    things and are not compared)."""
    samples = utilisation or {}
    return {"peak_pss_bytes": max(filter(None, samples.get("pss_bytes") or []), default=None),
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
        killed = [line.removeprefix("killed: ") for line in stderr_tail if line.startswith("killed: ")]
        if killed:  # the harness's word on how it ended (dlbench.harness.train_in_child): in the first line
            reason += f"; {killed[-1]}"
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
        "run_set": spec["run_set"],
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
        "precision": result.get("precision"),  # dlbench.precision.measure: the precision the model computed in
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
