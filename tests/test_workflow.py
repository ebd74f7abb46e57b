"""The workflow end to end: lint, the job graph, a smoke run in a fresh copy, the report."""
import json
import re
import subprocess

import pandas as pd
import pytest

from benchlib.tables import load_records
from conftest import REPO, snakemake, venv_python

FRAMEWORKS = ("pytorch", "tensorflow", "mxnet")
SMOKE = ("--configfile", "presets/smoke.yaml")
PARAMETERS = {"small": 402_442, "large": 4_104_202}


def job_counts(dry_run_output):
    """{rule: count} from the 'Job stats' table of a dry run."""
    table = dry_run_output.split("Job stats:", 1)[1].split("\n\n", 1)[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.MULTILINE) if m[1] != "total"}


def test_lint_passes():
    snakemake("--lint")


def test_smoke_dry_run_plans_every_framework_and_strategy():
    counts = job_counts(snakemake("-n", "--forceall", *SMOKE).stdout)
    # 2 models x (pytorch: single, ddp, dp; tensorflow: single, mirrored, multiworker; mxnet: single, kvstore)
    assert counts["train_mnist"] == 2 * (3 + 3 + 2)
    assert counts["build_venv"] == 5
    assert counts["aggregate"] == 1 and counts["plot_mnist"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_every_framework_builds_the_same_models(framework):
    script = REPO / "scripts" / framework / "mnist.py"
    for model, count in PARAMETERS.items():
        out = subprocess.run([venv_python(framework), str(script), "--count-parameters", model],
                             capture_output=True, text=True, check=True).stdout
        assert int(out.split()[-1]) == count, (framework, model)


@pytest.fixture(scope="module")
def smoke_run(workflow_copy):
    snakemake("--cores", "2", *SMOKE, cwd=workflow_copy)
    snakemake("--report", "results/report.html", *SMOKE, cwd=workflow_copy)
    return workflow_copy


def records(root, framework):
    paths = sorted((root / "results" / "runs" / "mnist" / framework).glob("*.json"))
    return load_records(paths)  # validates each against schemas/run.schema.json


@pytest.mark.slow
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_every_framework_trains_the_smoke_config_with_falling_loss(smoke_run, framework):
    runs = records(smoke_run, framework)
    assert len(runs) == (6 if framework != "mxnet" else 4)
    for run in runs:
        if run["spec"]["strategy"] == "dp":  # DataParallel needs GPUs; this machine has none
            assert run["status"] == "not_applicable" and "GPU" in run["error"]
            continue
        assert run["status"] == "ok", run["error"]
        losses = [epoch["loss"] for epoch in run["epochs"]]
        assert len(losses) == 2 and losses[1] < losses[0], (run["run_id"], losses)
        assert run["summary"]["samples_per_s"] > 0
        assert run["device"] == {**run["device"], "kind": "cpu", "count": run["spec"]["devices"]}
        assert run["environment"]["framework_version"]
        assert run["memory"]["peak_rss_bytes"] > 0


@pytest.mark.slow
def test_the_report_holds_tables_figures_and_the_unsuccessful_runs(smoke_run):
    html = (smoke_run / "results" / "report.html").read_text()
    for figure in ("throughput", "first-vs-second-epoch", "scale-up", "accuracy"):
        assert f"{figure}.png" in html
    runs = pd.read_csv(smoke_run / "results" / "tables" / "mnist-runs.csv")
    epochs = pd.read_csv(smoke_run / "results" / "tables" / "mnist-epochs.csv")
    assert len(runs) == 16 and len(epochs) == 14 * 2 + 2  # two dp runs with no epoch keep a row each
    unsuccessful = pd.read_csv(smoke_run / "results" / "tables" / "mnist-unsuccessful-runs.csv")
    assert sorted(unsuccessful["status"]) == ["not_applicable"] * 2


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
    assert counts == {"build_venv": 1, "train_mnist": 4, "aggregate": 1, "plot_mnist": 1, "all": 1}
    planned = re.findall(r"output: (results/runs/\S+?)(?:,|\n)", out)
    assert planned and all("/mxnet/" in path for path in planned)


@pytest.mark.slow
def test_a_crashing_run_is_recorded_as_failed_with_its_error(smoke_run, tmp_path):
    spec = json.loads(json.dumps(records(smoke_run, "pytorch")[0]["spec"]))
    spec["data"]["train_images"] = str(tmp_path / "missing-images.npy")
    out = tmp_path / "record.json"
    subprocess.run([venv_python("pytorch"), str(REPO / "scripts" / "run_benchmark.py"), "--spec",
                    json.dumps(spec), "--out", str(out)], check=True, capture_output=True)
    [record] = load_records([out])
    assert record["status"] == "failed"
    assert "missing-images.npy" in record["error"] and record["epochs"] == []


@pytest.mark.slow
def test_a_run_past_its_timeout_is_killed_and_recorded_as_failed(smoke_run, tmp_path):
    spec = records(smoke_run, "tensorflow")[0]["spec"]
    spec["timeout_s"] = 1
    out = tmp_path / "record.json"
    subprocess.run([venv_python("tensorflow"), str(REPO / "scripts" / "run_benchmark.py"), "--spec",
                    json.dumps(spec), "--out", str(out)], check=True, capture_output=True)
    [record] = load_records([out])
    assert record["status"] == "failed" and "timed out" in record["error"]
