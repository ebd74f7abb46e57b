"""Records -> tidy tables (pandas). Used by the report environment and the tests."""
import json
from pathlib import Path

import pandas as pd

from dlbench.definitions import run_set
from dlbench.frameworks import FRAMEWORKS
from dlbench.machine import cpu_line
from dlbench.record import contended_unit
from dlbench.run_schema import record_error
from dlbench.specs import spec_from_dict

ERROR_LINES = 6  # of a failed run's error, the last lines go into the tables


class RecordError(ValueError):
    """A record that does not match schemas/run.schema.json; the message names the file."""


def load_records(paths, invalid=None):
    """The records of `paths`, each validated. A bad one raises RecordError naming it, or,
    given a list `invalid`, is left out and listed there as (path, error)."""
    records = []
    for path in paths:
        error = record_error(path) if Path(path).exists() else f"{path}: no such record"
        if error is not None:
            if invalid is None:
                raise RecordError(error)
            invalid.append((str(path), error))
            continue
        records.append(json.loads(Path(path).read_text()))
    return records


def _short_error(error):
    return "\n".join(error.strip().splitlines()[-ERROR_LINES:]) if error else None


def _flatten(value, prefix):
    """Nested dicts of results -> {prefix_key_subkey: value} (e.g. test_auc_macro)."""
    if not isinstance(value, dict):
        return {prefix: value}
    flat = {}
    for key, item in value.items():
        flat.update(_flatten(item, f"{prefix}_{key}"))
    return flat


def run_keys(records):
    """The columns of a run id in a set of records, in run-id order: the sweep point's keys, then repeat."""
    keys = []
    for record in records:
        keys += [key for key in record["point"] if key not in keys]
    return keys + ["repeat"]


def _base(record):
    """What identifies a run in every table: run set, framework, run id, sweep point, repeat, status."""
    return {"run_set": record["run_set"], "framework": record["framework"], "run_id": record["run_id"],
            **record["point"], "repeat": record["spec"]["repeat"], "status": record["status"]}


# the start-up's steps (dlbench.protocol.startup_seconds), each a runs table column startup_<step>_s
STARTUP_STEPS = ("interpreter", "framework", "setup", "build", "numerics", "first_batches")


def phase_seconds(record):
    """Where a run's time went, in seconds: the start-up's steps before the first block, training
    in its convergence segments and their steps (a block's wall_s leaves out the evaluation after
    it), evaluation (the segments' and the final one), calibration and warm-up units, steady
    units, contended units timed again. None for a failed run or one with no blocks: what it did
    is not known."""
    segments, units = record["segments"], record["units"]
    startup = record.get("startup") or {}
    phases = {f"startup_{step}_s": startup.get(f"{step}_s") for step in STARTUP_STEPS}
    if record["status"] == "failed" or not (segments or units):
        return {**dict.fromkeys(phases), **dict.fromkeys(("convergence_s", "convergence_steps", "eval_s",
                                                          "warmup_s", "steady_s", "contended_s"))}
    return {
        **phases,
        "convergence_s": sum(segment["wall_s"] for segment in segments),
        "convergence_steps": sum(segment["steps"] for segment in segments),
        "eval_s": sum(segment["eval_s"] for segment in segments) + (record["final_eval_s"] or 0),
        "warmup_s": sum(unit["wall_s"] for unit in units if unit["kind"] in ("calibration", "warmup")),
        "steady_s": sum(unit["wall_s"] for unit in units if unit["kind"] == "steady"),
        "contended_s": sum(unit["wall_s"] for unit in units if unit["kind"] == "contended"),
    }


def run_row(record):
    """One row per run: the sweep point, what ran, the summary and the status."""
    spec, summary, memory = record["spec"], record["summary"], record["memory"]
    plan = record["plan"] or {}
    # an epoch of the run's training set, timed at its steady seconds per step
    samples, global_batch = record.get("train_samples"), spec.get("batch", 0) * spec.get("devices", 1)
    epoch_steps = samples // global_batch if samples and global_batch else None
    device = record["devices_used"] or {}
    numerics = record["numerics"] or {}
    gpu_float32 = numerics.get("gpu_float32") or {}
    precision = record.get("precision") or {}
    final_metric = summary.get("final_metric") or {}
    data = spec.get("data") if isinstance(spec.get("data"), dict) else {}
    counted = run_set(record["run_set"])
    sample_flops = counted.flops(spec_from_dict(spec)) if counted and counted.flops and record["status"] == "ok" else None
    nodes_peak = memory["node_peak_rss_bytes"]
    return {
        **_base(record),
        "error": _short_error(record["error"]),
        "framework_version": record["environment"]["framework_version"],
        "device_kind": device.get("kind"),
        "hosts": " ".join(str(node["hostname"]) for node in record["nodes"]),  # its nodes', in node order
        # eager or compiled (dlbench.frameworks): what the run's mode is, for every framework the same words
        "mode_kind": FRAMEWORKS[record["framework"]].mode_kind(spec["mode"]) if spec.get("mode") else None,
        "segments": len(record["segments"]),
        "unit_steps": plan.get("unit_steps"),
        "warmup_units": plan.get("warmup_units"),
        "warmup_end": plan.get("warmup_end"),
        # the run's numerics policy, and whether the framework's own ops flushed denormals (measured)
        "numerics": numerics.get("policy", spec.get("numerics")),
        "flushes_denormals": numerics.get("framework_flushes"),
        # the heap allocator's policy the training process started under (dlbench.allocator)
        "allocator": (numerics.get("allocator") or {}).get("policy", spec.get("allocator")),
        # float32 products on GPUs: the policy, and the precision a product on the run's device showed
        "gpu_float32": gpu_float32.get("policy", spec.get("gpu_float32")),
        "float32_product": gpu_float32.get("precision"),
        # the precision the model computed in, measured (dlbench.precision): the share of its forward pass's
        # compute FLOPs in 16 bits, the precision that is, and whether it is the point's
        "precision_measured": precision.get("measured"),
        "precision_share_16bit": precision.get("share_16bit"),
        "precision_followed": precision.get("followed"),
        "loss_scaling": precision.get("loss_scaling"),
        "steady_units": summary["steady_units"],
        "steady_steps": summary["steady_steps"],
        "first_segment_s": summary["first_segment_s"],
        # cold: compiled from an empty cache (the point's compile figure); warm: loaded repeat 1's programs
        "compile_cache": "cold" if spec["compile_cache"]["fill"] else "warm",
        "compile_s": summary["compile_s"],
        "steady_unit_s": summary["steady_unit_s"],
        "seconds_per_step": summary["seconds_per_step"],
        "samples_per_s": summary["samples_per_s"],
        # the model's FLOPs of a training sample (dlbench.flops, the same count for every framework), their rate
        "sample_flops": sample_flops,
        "flop_s": None if sample_flops is None or summary["samples_per_s"] is None
        else sample_flops * summary["samples_per_s"],
        "epoch_steps": epoch_steps,
        "epoch_s": None if epoch_steps is None or summary["seconds_per_step"] is None
        else epoch_steps * summary["seconds_per_step"],
        "final_loss": summary["final_loss"],
        **{f"final_{name}": value for name, value in final_metric.items()},
        **{k: v for key, value in record["final"].items() for k, v in _flatten(value, key).items()},
        "final_eval_s": record["final_eval_s"],
        "parameters": record["parameters"],
        "initial_weights_sha256": (record.get("initial_weights") or {}).get("sha256"),
        "peak_pss_bytes": memory["peak_pss_bytes"],
        # the training processes' own high-water marks (ru_maxrss, exact), summed over the run's nodes
        "peak_rss_bytes": None if not nodes_peak or None in nodes_peak else sum(nodes_peak),
        "gpu_process_peak_bytes": memory["gpu_process_peak_bytes"],
        **{f"gpu_allocator_peak {name}": value for name, value in memory["gpu_allocator_peak"].items()},
        "train_limit": data.get("train_limit"),
        "wall_s": record["wall_s"],
        **phase_seconds(record),
    }


def time_to_target(record, metric, target):
    """(seconds, steps) to `target`: the convergence steps until `metric` first reaches it, and
    those steps times the run's steady seconds per step (time to accuracy as steps to accuracy,
    the same from the same start in every framework, times time per step; compilation and
    evaluation left out); (None, None) if it never does, or the run has no segment (a repeat
    after measurement.convergence_repeats)."""
    for segment in record["segments"]:
        if segment["metric"].get(metric, float("-inf")) >= target:
            per_step = record["summary"]["seconds_per_step"]
            return (None if per_step is None else segment["step_end"] * per_step), segment["step_end"]
    return None, None


def _machine(block):
    machine = block["machine"] or {}
    return {key: machine.get(key) for key in ("steal_s", "other_cpu_s", "run_cpu_s", "minor_faults", "cpus")}


def unit_rows(record, min_unit_seconds, max_other_cpus):
    """One row per timed unit of a run (calibration, warm-up, steady, and the contended ones timed
    again: `warmup` is every unit that is not steady); with what the machine did meanwhile,
    whether a steady unit was shorter than the minimum and whether other processes took more
    than `max_other_cpus` cores during it (a steady unit that was counted all the same: the run
    timed its contended units again up to max_contended_reruns; a step on OpenMP threads, as
    PyTorch's and MXNet's, stalls when one of its cores is taken). A duet's side (config variants,
    schedule: duet) has the other side beside it by design: it is judged by the limit its spec ran
    with, which leaves the other side's cores out (dlbench.sweep.run_fields)."""
    if record["spec"].get("duet"):
        max_other_cpus = record["spec"]["measure"]["max_other_cpus"]
    not_followed = (record.get("precision") or {}).get("followed") is False
    rows = []
    for unit in record["units"]:
        steady = unit["kind"] == "steady"
        rows.append({
            **_base(record),
            "unit": unit["index"],
            "kind": unit["kind"],
            "warmup": not steady,
            "wall_s": unit["wall_s"],
            "samples": unit["samples"],
            "steps": unit["steps"],
            "step": unit["step_end"],
            "samples_per_s": unit["samples"] / unit["wall_s"],
            "loss": unit["loss"],
            **_machine(unit),
            "below_minimum": steady and unit["wall_s"] < min_unit_seconds,
            "contended": steady and contended_unit(unit["machine"] or {}, unit["wall_s"], max_other_cpus),
            # the run's measured precision is not its point's (dlbench.precision): no verdict rests on it
            "precision_not_followed": steady and not_followed,
        })
    return rows


def units_table(records, min_unit_seconds, max_other_cpus):
    columns = ["run_set", "framework", "run_id", *run_keys(records), "status", "unit", "kind", "warmup", "wall_s",
               "samples", "steps", "step", "samples_per_s", "loss", "steal_s", "other_cpu_s", "run_cpu_s", "minor_faults",
               "cpus", "below_minimum", "contended", "precision_not_followed"]
    rows = [row for record in records for row in unit_rows(record, min_unit_seconds, max_other_cpus)]
    return pd.DataFrame(rows, columns=columns)


def segment_rows(record):
    """One row per run and convergence segment (loss and metric by step); a run with no
    segment (a repeat after measurement.convergence_repeats, a run set without convergence, a
    run that failed first) still gets one row, with its status and no segment."""
    if not record["segments"]:
        return [{**_base(record), "segment": None}]
    return [{
        **_base(record),
        "segment": segment["index"],
        "step": segment["step_end"],
        "epoch": segment["epoch"],
        "wall_s": segment["wall_s"],
        "samples": segment["samples"],
        "samples_per_s": segment["samples"] / segment["wall_s"],
        "loss": segment["loss"],
        **segment["metric"],
        "eval_s": segment["eval_s"],
        "lr": segment.get("lr"),
    } for segment in record["segments"]]


def environment_rows(records):
    """The distinct environments the runs ran in (runs that died before saying are left out)."""
    rows = []
    for record in records:
        env = record["environment"]
        if env["framework_version"] is None and env["library_version"] is None:
            continue
        rows.append({
            "framework": record["framework"],
            "framework_version": env["framework_version"],
            "library": record["spec"].get("library"),
            "library_version": env["library_version"],
            "python": env["python"],
            "device_kind": (record["devices_used"] or {}).get("kind"),
            "cpu_model": env["cpu_model"],
            "cpu": cpu_line(env["cpu"]),
            "cpu_flags": " ".join(env["cpu"]["flags"]),
            "cpu_count": env["cpu_count"],
            "huge_pages": env.get("huge_pages"),  # records before it say nothing
            "gpus": "; ".join(f"{g['name']} (driver {g['driver']})" for g in env["gpus"]) or "none",
            "os": env["os"],
            "hostname": env["hostname"],
            "git_commit": env["git_commit"],
            "packages": " ".join(f"{name}=={version}" for name, version in env["packages"].items()),
            # a venv or conda env built from the env file, or the user's own interpreter (config interpreters)
            "interpreter": (env.get("interpreter") or {}).get("kind"),
            "interpreter_path": (env.get("interpreter") or {}).get("executable"),
            # private API run on a version it was not written for (config private_api_override)
            "private_api_override": "; ".join(
                f"{used['package']} {used['found']}, written for {used['written_for']} ({used['module']})"
                for used in env.get("private_api_overrides") or []),
        })
    columns = ["framework", "framework_version", "library", "library_version", "python", "device_kind", "cpu_model", "cpu", "cpu_flags", "cpu_count",
               "huge_pages", "gpus", "os", "hostname", "git_commit", "packages", "interpreter", "interpreter_path",
               "private_api_override"]
    return pd.DataFrame(rows, columns=columns).drop_duplicates().sort_values(["framework", "library", "hostname"])


def utilisation_rows(records):
    """One row per utilisation sample of each run (GPU columns per GPU, where there are GPUs)."""
    frames = []
    for record in records:
        samples = record.get("utilisation")
        if not samples or not samples["t_s"]:
            continue
        frame = pd.DataFrame({key: samples[key] for key in ("t_s", "cpu_percent", "pss_bytes")})
        for name in ("gpu_percent", "gpu_memory_bytes"):
            for gpu, series in enumerate(zip(*samples[name])):
                frame[f"{name}_{gpu}"] = series
        for key, value in reversed([*record["point"].items(), ("repeat", record["spec"]["repeat"])]):
            frame.insert(0, key, value)
        frame.insert(0, "run_id", record["run_id"])
        frame.insert(0, "framework", record["framework"])
        frames.append(frame)
    if not frames:
        return pd.DataFrame(columns=["framework", "run_id", *run_keys(records), "t_s", "cpu_percent", "pss_bytes"])
    return pd.concat(frames, ignore_index=True)


def tables(records, target=None):
    """(runs, convergence) data frames of one run set's records; with target (metric, value),
    each run's steps and time to that target (empty for a run with no segment)."""
    runs = pd.DataFrame([run_row(r) for r in records])
    if target is not None:
        reached = [time_to_target(r, *target) for r in records]
        runs["target"] = f"{target[0]} >= {target[1]:g}"
        runs["time_to_target_s"] = [seconds for seconds, _ in reached]
        runs["steps_to_target"] = pd.array([steps for _, steps in reached], dtype="Int64")
        # a run with no segment says nothing of the target: empty, not false
        runs["target_reached"] = pd.array([steps is not None if r["segments"] else None
                                           for r, (_, steps) in zip(records, reached)], dtype="boolean")
    # Whole numbers stay whole where some runs have none (nullable integers).
    integer_columns = ["segments", "unit_steps", "epoch_steps", "warmup_units", "parameters", "peak_pss_bytes",
                       "peak_rss_bytes", "gpu_process_peak_bytes", "train_limit", "sample_flops", "convergence_steps"]
    runs[integer_columns] = runs[integer_columns].astype("Int64")
    convergence = pd.DataFrame([row for r in records for row in segment_rows(r)])
    order = ["framework", *run_keys(records)]
    return runs.sort_values(order, ignore_index=True), convergence.sort_values(order + ["segment"], ignore_index=True)


def unsuccessful(runs, invalid=()):
    """Failed and not applicable runs, and records that could not be read (status invalid)."""
    columns = ["run_set", "framework", "run_id", "status", "error"]
    bad = pd.DataFrame([{"run_set": None, "framework": None, "run_id": path, "status": "invalid", "error": error}
                        for path, error in invalid], columns=columns)
    rows = runs.loc[runs["status"] != "ok", columns] if len(runs) else pd.DataFrame(columns=columns)
    return pd.concat([rows, bad], ignore_index=True) if len(bad) else rows
