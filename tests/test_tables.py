import json

import pandas as pd
import pytest

from dlbench.frameworks import FRAMEWORKS
from dlbench.processes import kill_cause
from dlbench.record import make_record
from dlbench.specs import spec_from_dict, spec_to_dict
from dlbench.tables import (
    RecordError,
    environment_rows,
    load_records,
    run_row,
    tables,
    time_to_target,
    units_table,
    unsuccessful,
    utilisation_rows,
)
from dlbench.workloads.mnist.definition import COLUMNS as MNIST_COLUMNS
from specs import smoke_spec


def point(devices=1, strategy="none", mode="eager"):
    return {"model": "small", "duplicate": 1, "batch": 64, "devices": devices, "nodes": 1, "strategy": strategy,
            "mode": mode, "precision": "float32"}


def spec(framework="pytorch", repeat=1, **where):
    where.setdefault("mode", FRAMEWORKS[framework].default_mode)
    spec = smoke_spec("mnist", framework, **point(**where), repeat=repeat)
    return spec_to_dict(spec)


def record(spec, result, *args, **kwargs):
    return make_record(spec, spec_from_dict(spec).point(), result, *args, **kwargs)


MACHINE = {"steal_s": 0.0, "other_cpu_s": 0.0, "run_cpu_s": 1.0, "minor_faults": 100, "cpus": 2}


def result(*unit_times, segment_times=(3.0, 1.0, 2.0)):
    """A run of 10-step convergence segments (test accuracy 0.5, 0.6, 0.7, ...) and 10-step
    units, the first of them the warm-up, the others steady."""
    segments = [{"kind": "segment", "index": i + 1, "steps": 10, "step_end": 10 * (i + 1), "epoch": 1, "wall_s": t,
                 "samples": 600, "loss": 1.0 / (i + 1), "metric": {"test_accuracy": 0.5 + i / 10}, "eval_s": 0.1,
                 "machine": MACHINE, "lr": None} for i, t in enumerate(segment_times)]
    start = 10 * len(segments)
    units = [{"kind": "warmup" if i == 0 else "steady", "index": i + 1, "steps": 10, "step_end": start + 10 * (i + 1),
              "epoch": 2, "wall_s": t, "samples": 600, "loss": 0.2,
              "machine": {**MACHINE, "other_cpu_s": 0.5 * i, "run_cpu_s": 2 * t}} for i, t in enumerate(unit_times)]
    return {
        "status": "ok", "framework_version": "9.9", "devices_used": {"kind": "cpu", "count": 1, "names": []},
        "threads": {"intra": 2}, "parameters": 402_442, "gpu_allocator_peak": {}, "train_samples": 1024,
        "initial_weights": {"source": "shared", "sha256": "ab" * 32},
        "segments": segments, "units": units, "plan": {"unit_steps": 10, "warmup_units": 1, "warmup_end": "cap"},
    }


def write_records(tmp_path, *records):
    paths = []
    for i, record in enumerate(records):
        path = tmp_path / f"{i}.json"
        path.write_text(json.dumps(record))
        paths.append(path)
    return paths


def test_summary_reports_the_steady_units_apart_from_warm_up_and_convergence():
    made = record(spec(), result(3.0, 1.0, 2.0, segment_times=(5.0, 1.0)), 0, [], "now", 7.0)
    assert made["status"] == "ok"
    assert made["summary"]["first_segment_s"] == 5.0
    assert made["summary"]["steady_unit_s"] == pytest.approx(1.5)  # the median of the steady units
    assert made["summary"]["seconds_per_step"] == pytest.approx(0.15)
    assert made["summary"]["samples_per_s"] == pytest.approx((600 + 300) / 2)  # median of their throughputs
    assert made["summary"]["steady_units"] == 2 and made["summary"]["steady_steps"] == 20
    # compilation: what the blocks before the first steady one took beyond 0.15 s a step (their
    # wall_s leaves out the evaluations)
    assert made["summary"]["compile_s"] == pytest.approx((5.0 - 1.5) + (1.0 - 1.5) + (3.0 - 1.5))
    assert made["point"] == point() and made["parameters"] == 402_442


def test_a_runs_row_gives_the_models_flops_of_a_sample_and_their_rate():
    made = record(spec(), result(3.0, 1.0, 2.0), 0, [], "now", 7.0)
    row = run_row(made)
    assert row["sample_flops"] == 3_315_456  # MNIST small (tests/test_flops.py)
    assert row["flop_s"] == pytest.approx(3_315_456 * (600 + 300) / 2)  # at its median images/s


def test_a_crash_is_failed_with_the_error_and_keeps_finished_blocks():
    partial = result(2.0)
    partial["status"] = "running"
    made = record(spec(), partial, -9, ["Traceback", "MemoryError"], "now", 3.0)
    assert made["status"] == "failed"
    assert "exit code -9" in made["error"] and "MemoryError" in made["error"]
    assert len(made["units"]) == 1 and len(made["segments"]) == 3


def test_a_run_killed_by_a_signal_names_its_cause_and_its_memory_in_the_first_line_of_its_error():
    gib = 2 ** 30
    oom = kill_cause(-9, 3, 4, 23.8 * gib, 24 * gib)
    first = record(spec(), None, -9, ["Traceback", oom], "now", 3.0)["error"].splitlines()[0]
    assert first.startswith("training process failed (exit code -9; out of memory, by the kernel's OOM killer")
    assert "SIGKILL; its processes' peak PSS 24,371 MiB of the machine's 24,576 MiB" in first
    assert kill_cause(-9, 3, 3, None, 24 * gib) == (
        "killed: by SIGKILL from outside the run (its peak memory unknown of the machine's 24,576 MiB; "
        "the kernel's OOM killer counted no kill meanwhile)")
    assert kill_cause(-15, None, None, gib, 24 * gib).startswith("killed: by SIGTERM from outside the run (its")


def test_no_result_at_all_is_failed():
    made = record(spec(), None, 1, ["ImportError: no module named torch"], "now", 1.0)
    assert made["status"] == "failed" and made["units"] == [] and made["segments"] == []


def test_tidy_tables_have_a_row_per_run_and_per_segment(tmp_path):
    ok = record(spec(), result(3.0, 1.0, segment_times=(1.0, 1.0)), 0, [], "now", 5.0)
    ok2 = record(spec(devices=2, strategy="ddp"), result(4.0, 2.0, segment_times=(1.0, 1.0)), 0, [], "now", 6.0)
    failed = record(spec(devices=2, strategy="dp"), None, 1, ["boom"], "now", 1.0)
    records = load_records(write_records(tmp_path, ok, ok2, failed))
    runs, convergence = tables(records)
    assert len(runs) == 3 and len(convergence) == 2 + 2 + 1
    assert set(convergence.columns) >= {"framework", *MNIST_COLUMNS, "segment", "step", "wall_s", "samples_per_s",
                                        "loss", "test_accuracy"}
    # an epoch of the training set (1024 samples, global batch 64 x 2) at the steady seconds per step
    assert runs.loc[runs["strategy"] == "ddp", "epoch_s"].item() == pytest.approx(8 * 0.2)
    failed_row = runs[runs["strategy"] == "dp"].iloc[0]
    assert failed_row["status"] == "failed" and "boom" in failed_row["error"]
    assert runs.loc[runs["strategy"] == "ddp", "samples_per_s"].item() == pytest.approx(300)
    assert list(unsuccessful(runs)["run_id"]) == [failed["run_id"]]
    assert environment_rows(records)["framework_version"].tolist() == ["9.9"]
    assert ok["initial_weights"] == {"source": "shared", "sha256": "ab" * 32}
    assert runs["initial_weights_sha256"].fillna("none").tolist() == ["ab" * 32, "ab" * 32, "none"]


def test_the_runs_table_splits_a_runs_time_into_its_phases(tmp_path):
    # segments 3 + 1 s (0.1 s of evaluation after each, outside their wall_s), a warm-up unit of
    # 4 s, steady units 1 + 2 s; a final evaluation of 0.5 s; 20 s in all
    timed = result(4.0, 1.0, 2.0, segment_times=(3.0, 1.0))
    timed["final_eval_s"] = 0.5
    calibrated = result(2.0, 1.0)
    calibrated["units"][0]["kind"] = "calibration"
    ok = record(spec(), timed, 0, [], "now", 20.0)
    calibrated = record(spec(devices=2, strategy="ddp"), calibrated, 0, [], "now", 9.0)
    failed = record(spec(devices=2, strategy="dp"), result(4.0), -9, ["killed"], "now", 8.0)
    runs, _ = tables(load_records(write_records(tmp_path, ok, calibrated, failed)))
    row = runs[runs["strategy"] == "none"].iloc[0]
    assert row["convergence_s"] == pytest.approx(4.0) and row["convergence_steps"] == 20
    assert row["eval_s"] == pytest.approx(0.1 + 0.1 + 0.5)
    assert row["warmup_s"] == pytest.approx(4.0) and row["steady_s"] == pytest.approx(3.0)
    assert runs.loc[runs["strategy"] == "ddp", "warmup_s"].item() == pytest.approx(2.0)  # calibration counts
    # a failed run's blocks (it may have died in any of them) are no measure of where its time went
    failed_row = runs[runs["strategy"] == "dp"].iloc[0]
    assert failed_row[["convergence_s", "eval_s", "warmup_s", "steady_s"]].isna().all()
    assert pd.isna(failed_row["convergence_steps"]) and failed_row["wall_s"] == 8.0


def test_an_invalid_record_is_named_with_the_field(tmp_path):
    made = record(spec(), result(3.0, 1.0), 0, [], "now", 5.0)
    made["units"][0]["wall_s"] = -1
    paths = write_records(tmp_path, made)
    with pytest.raises(RecordError, match=r"0.json: invalid run record at units/0/wall_s"):
        load_records(paths)


def test_unreadable_record_is_named(tmp_path):
    path = tmp_path / "half.json"
    path.write_text('{"status": ')
    with pytest.raises(RecordError, match="half.json"):
        load_records([path])


def test_utilisation_samples_become_rows_with_the_sweep_point(tmp_path):
    made = record(spec(), result(3.0, 1.0), 0, [], "now", 5.0, utilisation={
        "interval_s": 0.5, "cpu_count": 2, "t_s": [0.5, 1.0], "cpu_percent": [50.0, 99.0],
        "pss_bytes": [10, 20], "gpu_percent": [[10, 20], [30, 40]], "gpu_memory_bytes": [[1, 2], [3, 4]],
        "gpu_process_bytes": [5, 7]})
    [loaded] = load_records(write_records(tmp_path, made))
    rows = utilisation_rows([loaded])
    assert rows["cpu_percent"].tolist() == [50.0, 99.0]
    assert rows["gpu_percent_1"].tolist() == [20, 40]  # one column per GPU
    assert set(rows["strategy"]) == {"none"} and set(rows["run_id"]) == {made["run_id"]}
    # the peaks come from the samples of the whole process tree, the same for every framework
    assert loaded["memory"]["peak_pss_bytes"] == 20 and loaded["memory"]["gpu_process_peak_bytes"] == 7


def test_final_results_are_flattened_into_the_runs_table(tmp_path):
    extra = result(3.0, 1.0)
    extra["final"] = {"test_auc": {"macro": 0.75, "per_pathology": {"Hernia": None, "Mass": 0.5}}}
    records = load_records(write_records(tmp_path, record(spec(), extra, 0, [], "now", 5.0)))
    runs, _ = tables(records)
    assert runs.loc[0, "test_auc_macro"] == 0.75 and runs.loc[0, "test_auc_per_pathology_Mass"] == 0.5


def test_units_table_marks_the_warm_up_short_units_and_what_the_machine_did(tmp_path):
    records = load_records(write_records(tmp_path, record(spec(), result(3.0, 0.5, 2.0), 0, [], "now", 7.0)))
    units = units_table(records, min_unit_seconds=1.0, max_other_cpus=0.4)
    assert units["kind"].tolist() == ["warmup", "steady", "steady"]
    assert units["warmup"].tolist() == [True, False, False]
    assert units["step"].tolist() == [40, 50, 60] and units["minor_faults"].tolist() == [100, 100, 100]
    assert units["below_minimum"].tolist() == [False, True, False]  # the warm-up is never a steady unit
    assert units["other_cpu_s"].tolist() == [0.0, 0.5, 1.0] and units["cpus"].tolist() == [2, 2, 2]
    # other processes' cores per second of the unit: 0.5 / 0.5 s, 1.0 / 2.0 s
    assert units["contended"].tolist() == [False, True, True]
    assert units_table(records, min_unit_seconds=1.0, max_other_cpus=0.6)["contended"].tolist() == [False, True, False]
    assert list(units.columns[:3]) == ["run_set", "framework", "run_id"]
    assert units.columns[units.columns.get_loc("status") - 1] == "repeat"


def test_time_to_accuracy_is_steps_to_the_target_times_steady_seconds_per_step(tmp_path):
    # accuracy 0.5, 0.6, 0.7 after 10, 20, 30 steps; steady units of 10 steps in 1 and 2 s: 0.15 s a step
    made = record(spec(), result(3.0, 1.0, 2.0), 0, [], "now", 7.0)
    assert time_to_target(made, "test_accuracy", 0.6) == (pytest.approx(3.0), 20)
    assert time_to_target(made, "test_accuracy", 0.95) == (None, None)
    records = load_records(write_records(tmp_path, made))
    runs, _ = tables(records, ("test_accuracy", 0.65))
    assert runs.loc[0, "time_to_target_s"] == pytest.approx(4.5) and runs.loc[0, "steps_to_target"] == 30
    runs, _ = tables(records, ("test_accuracy", 0.99))
    assert not runs.loc[0, "target_reached"] and pd.isna(runs.loc[0, "time_to_target_s"])


def test_a_repeat_without_segments_has_an_empty_time_to_target_and_keeps_its_throughput(tmp_path):
    """Repeat 1 trains the convergence segments (measurement.convergence_repeats), repeat 2 does
    not: its time to target is empty (neither reached nor missed), its throughput is measured."""
    with_segments = record(spec(repeat=1), result(3.0, 1.0, 2.0), 0, [], "now", 7.0)
    without = record(spec(repeat=2), result(3.0, 1.0, 2.0, segment_times=()), 0, [], "now", 4.0)
    assert spec(repeat=2)["convergence"]["steps"] == 0 < spec(repeat=1)["convergence"]["steps"]
    assert without["summary"]["first_segment_s"] is None and without["summary"]["final_metric"] is None
    # steady units of 600 samples in 1 and 2 s: a median of 450 samples/s
    assert without["summary"]["samples_per_s"] == with_segments["summary"]["samples_per_s"] == pytest.approx(450)
    assert time_to_target(without, "test_accuracy", 0.6) == (None, None)
    runs, convergence = tables(load_records(write_records(tmp_path, with_segments, without)), ("test_accuracy", 0.6))
    first, second = runs.iloc[0], runs.iloc[1]
    assert (first["repeat"], second["repeat"]) == (1, 2)
    assert first["target_reached"] and first["steps_to_target"] == 20
    assert pd.isna(second["target_reached"]) and pd.isna(second["steps_to_target"])
    assert pd.isna(second["time_to_target_s"]) and pd.isna(second["first_segment_s"])
    assert second["segments"] == 0 and second["convergence_s"] == 0 and second["samples_per_s"] == pytest.approx(450)
    # the convergence table: repeat 1's segments, and repeat 2's one row with its status and no segment
    assert convergence["repeat"].tolist() == [1, 1, 1, 2]
    assert convergence.loc[convergence["repeat"] == 2, "segment"].isna().all()


def test_the_runs_table_says_the_numerics_and_the_environment_table_the_cpu(tmp_path):
    measured = {**result(3.0, 1.0), "numerics": {
        "policy": "flush", "applied": "flush", "mxcsr": "0x9fe0", "mxcsr_ftz": True, "mxcsr_daz": True,
        "numpy_thread_flushes": True, "framework_flushes": True, "gpu_float32": {
            "policy": "highest", "settings": {"NVIDIA_TF32_OVERRIDE": "0"}, "device_kind": "gpu",
            "median_relative_error": 2.8e-5, "precision": "tf32", "followed": False}}}
    records = load_records(write_records(tmp_path, record(spec(), measured, 0, [], "now", 5.0),
                                         record(spec(devices=2, strategy="dp"), None, 1, ["boom"], "now", 1.0)))
    runs, _ = tables(records)
    assert runs[["numerics", "flushes_denormals"]].values.tolist() == [["flush", True], ["flush", None]]
    # a failed run's policy comes from its spec; what a product showed, only from a process that ran
    assert runs["gpu_float32"].tolist() == ["highest", "highest"]
    assert runs["float32_product"].tolist()[0] == "tf32" and pd.isna(runs["float32_product"].tolist()[1])
    env = environment_rows(records).iloc[0]
    cpu = records[0]["environment"]["cpu"]
    assert env["cpu"] == (f"{cpu['vendor']} family {cpu['family']} model {cpu['model']} stepping {cpu['stepping']} "
                          f"{cpu['model_name']}")
    assert env["cpu_flags"] == " ".join(cpu["flags"])
    assert env["huge_pages"] == records[0]["environment"]["huge_pages"]


def test_the_environment_says_the_kernel_s_huge_page_mode(tmp_path, monkeypatch):
    from dlbench import machine

    enabled = tmp_path / "enabled"
    monkeypatch.setattr(machine, "TRANSPARENT_HUGE_PAGES", enabled)
    assert machine.huge_pages() is None  # a kernel that does not say
    enabled.write_text("always [madvise] never\n")
    assert machine.huge_pages() == "madvise"
    enabled.write_text("[always] madvise never\n")
    assert machine.environment()["huge_pages"] == "always"
