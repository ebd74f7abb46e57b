"""Records -> tidy tables (pandas). Used by the report environment and the tests."""
import json
from pathlib import Path

import jsonschema
import pandas as pd

from dlbench.record import cpu_line

RUN_SCHEMA = Path(__file__).resolve().parents[2] / "schemas" / "run.schema.json"
ERROR_LINES = 6  # of a failed run's error, the last lines go into the tables


class RecordError(ValueError):
    """A record that does not match schemas/run.schema.json; the message names the file."""


def load_records(paths, invalid=None):
    """The records of `paths`, each validated. A bad one raises RecordError naming it, or,
    given a list `invalid`, is left out and listed there as (path, error)."""
    validator = jsonschema.Draft202012Validator(json.loads(RUN_SCHEMA.read_text()))
    records = []
    for path in paths:
        try:
            try:
                record = json.loads(Path(path).read_text())
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
                raise RecordError(f"{path}: cannot be read as JSON ({err})") from err
            error = jsonschema.exceptions.best_match(validator.iter_errors(record))
            if error is not None:
                where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
                raise RecordError(f"{path}: invalid run record at {where}: {error.message}")
        except RecordError as err:
            if invalid is None:
                raise
            invalid.append((str(path), str(err)))
            continue
        records.append(record)
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


def point_keys(records):
    """The sweep point's keys of a set of records, in run-id order."""
    keys = []
    for record in records:
        keys += [key for key in record["point"] if key not in keys]
    return keys


def run_row(record):
    """One row per run: the sweep point, what ran, the summary and the status."""
    spec, summary, memory = record["spec"], record["summary"], record["memory"]
    device = record["device"] or {}
    numerics = record["numerics"] or {}
    final_metric = summary.get("final_metric") or {}
    data = spec.get("data") if isinstance(spec.get("data"), dict) else {}
    return {
        "workload": record["workload"],
        "framework": record["framework"],
        "run_id": record["run_id"],
        **record["point"],
        "status": record["status"],
        "error": _short_error(record["error"]),
        "framework_version": record["environment"]["framework_version"],
        "device_kind": device.get("kind"),
        # the run's numerics policy, and whether the framework's own ops flushed denormals (measured)
        "numerics": numerics.get("policy", spec.get("numerics")),
        "flushes_denormals": numerics.get("framework_flushes"),
        "epochs": len(record["epochs"]),
        "steady_units": summary["steady_units"],
        "steady_steps": summary["steady_steps"],
        "first_epoch_s": summary["first_epoch_s"],
        "steady_epoch_s": summary["steady_epoch_s"],
        "samples_per_s": summary["samples_per_s"],
        "final_loss": summary["final_loss"],
        **{f"final_{name}": value for name, value in final_metric.items()},
        **{k: v for key, value in record["final"].items() for k, v in _flatten(value, key).items()},
        "final_eval_s": record["final_eval_s"],
        "parameters": record["parameters"],
        "peak_pss_bytes": memory["peak_pss_bytes"],
        "peak_rss_bytes": memory["peak_rss_bytes"],
        "gpu_process_peak_bytes": memory["gpu_process_peak_bytes"],
        **{f"gpu_allocator_peak {name}": value for name, value in memory["gpu_allocator_peak"].items()},
        "train_limit": data.get("train_limit"),
        "wall_s": record["wall_s"],
    }


def time_to_target(epochs, metric, target):
    """(training seconds, epochs) until `metric` first reaches `target`, evaluation time left
    out, warm-up included (MLPerf's time to train); (None, None) if it never does."""
    seconds = 0.0
    for epoch in epochs:
        seconds += epoch["wall_s"]
        if epoch["metric"].get(metric, float("-inf")) >= target:
            return seconds, epoch["epoch"]
    return None, None


def unit_rows(record, min_unit_seconds):
    """One row per timed unit (epoch) of a run: the first is warm-up, the others steady; with
    what the machine did meanwhile and whether the unit was shorter than the minimum."""
    base = {"workload": record["workload"], "framework": record["framework"], "run_id": record["run_id"],
            **record["point"], "status": record["status"]}
    rows = []
    for index, epoch in enumerate(record["epochs"]):
        machine = epoch["machine"] or {}
        rows.append({
            **base,
            "unit": epoch["epoch"],
            "warmup": index == 0,
            "wall_s": epoch["wall_s"],
            "samples": epoch["samples"],
            "steps": epoch["steps"],
            "samples_per_s": epoch["samples"] / epoch["wall_s"],
            **{key: machine.get(key) for key in ("steal_s", "other_cpu_s", "run_cpu_s", "cpus")},
            "below_minimum": index > 0 and epoch["wall_s"] < min_unit_seconds,
        })
    return rows


def units_table(records, min_unit_seconds):
    columns = ["workload", "framework", "run_id", *point_keys(records), "status", "unit", "warmup", "wall_s",
               "samples", "steps", "samples_per_s", "steal_s", "other_cpu_s", "run_cpu_s", "cpus", "below_minimum"]
    rows = [row for record in records for row in unit_rows(record, min_unit_seconds)]
    return pd.DataFrame(rows, columns=columns)


def epoch_rows(record):
    """One row per run and epoch; a run with no epoch still gets one row, with its status."""
    base = {
        "workload": record["workload"],
        "framework": record["framework"],
        "run_id": record["run_id"],
        **record["point"],
        "status": record["status"],
    }
    if not record["epochs"]:
        return [{**base, "epoch": None}]
    rows = []
    for epoch in record["epochs"]:
        rows.append({
            **base,
            "epoch": epoch["epoch"],
            "wall_s": epoch["wall_s"],
            "samples": epoch["samples"],
            "samples_per_s": epoch["samples"] / epoch["wall_s"],
            "loss": epoch["loss"],
            **epoch["metric"],
            "eval_s": epoch["eval_s"],
            **({"lr": epoch["lr"]} if "lr" in epoch else {}),
        })
    return rows


def environment_rows(records):
    """The distinct environments the runs ran in (runs that died before saying are left out)."""
    rows = []
    for record in records:
        env = record["environment"]
        if env["framework_version"] is None:
            continue
        rows.append({
            "framework": record["framework"],
            "framework_version": env["framework_version"],
            "python": env["python"],
            "device": (record["device"] or {}).get("kind"),
            "cpu_model": env["cpu_model"],
            "cpu": cpu_line(env["cpu"]),
            "cpu_flags": " ".join(env["cpu"]["flags"]),
            "cpu_count": env["cpu_count"],
            "gpus": "; ".join(f"{g['name']} (driver {g['driver']})" for g in env["gpus"]) or "none",
            "os": env["os"],
            "hostname": env["hostname"],
            "git_commit": env["git_commit"],
            "packages": " ".join(f"{name}=={version}" for name, version in env["packages"].items()),
        })
    columns = ["framework", "framework_version", "python", "device", "cpu_model", "cpu", "cpu_flags", "cpu_count",
               "gpus", "os", "hostname", "git_commit", "packages"]
    return pd.DataFrame(rows, columns=columns).drop_duplicates().sort_values(["framework", "hostname"])


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
        for key, value in reversed(list(record["point"].items())):
            frame.insert(0, key, value)
        frame.insert(0, "run_id", record["run_id"])
        frame.insert(0, "framework", record["framework"])
        frames.append(frame)
    if not frames:
        return pd.DataFrame(columns=["framework", "run_id", *point_keys(records), "t_s", "cpu_percent", "pss_bytes"])
    return pd.concat(frames, ignore_index=True)


def tables(records, target=None):
    """(runs, epochs) data frames of one workload's records; with target (metric, value), each
    run's time and epochs to that target."""
    runs = pd.DataFrame([run_row(r) for r in records])
    if target is not None:
        reached = [time_to_target(r["epochs"], *target) for r in records]
        runs["target"] = f"{target[0]} >= {target[1]:g}"
        runs["time_to_target_s"] = [seconds for seconds, _ in reached]
        runs["epochs_to_target"] = pd.array([epochs for _, epochs in reached], dtype="Int64")
        runs["target_reached"] = [seconds is not None for seconds, _ in reached]
    # Whole numbers stay whole where some runs have none (nullable integers).
    integer_columns = ["epochs", "parameters", "peak_pss_bytes", "peak_rss_bytes", "gpu_process_peak_bytes", "train_limit"]
    runs[integer_columns] = runs[integer_columns].astype("Int64")
    epochs = pd.DataFrame([row for r in records for row in epoch_rows(r)])
    order = ["framework", *point_keys(records)]
    return runs.sort_values(order, ignore_index=True), epochs.sort_values(order + ["epoch"], ignore_index=True)


def unsuccessful(runs, invalid=()):
    """Failed and not applicable runs, and records that could not be read (status invalid)."""
    columns = ["workload", "framework", "run_id", "status", "error"]
    bad = pd.DataFrame([{"workload": None, "framework": None, "run_id": path, "status": "invalid", "error": error}
                        for path, error in invalid], columns=columns)
    rows = runs.loc[runs["status"] != "ok", columns] if len(runs) else pd.DataFrame(columns=columns)
    return pd.concat([rows, bad], ignore_index=True) if len(bad) else rows
