import json
import os
import re
import shutil
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

import resident
import warm_python

from dlbench.envs import env_file, venv_interpreter, venv_prefix
from dlbench.frameworks import FRAMEWORKS
from dlbench.harness import NO_TRAINING
from dlbench.tables import load_records

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "scripts"
SRC = REPO / "src"
# The scripts and framework code the tests start import the package as the workflow's jobs do.
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))

VENV_PREFIX = venv_prefix()


VENV_BUILD = threading.Lock()


def venv_python(stack):
    """The interpreter the workflow would use for envs/<stack>.yaml, built if missing; a quick test
    (not marked slow) starts no framework (the report's and the data's environments it may)."""
    if os.environ.get(NO_TRAINING) and stack in FRAMEWORKS:
        raise AssertionError(f"a test that starts the {stack} environment is slow: mark it so")
    venv = venv_interpreter(VENV_PREFIX, REPO / "envs", stack).parent
    with VENV_BUILD:  # tests side by side (side_by_side) never build one venv twice at once
        if not (venv / "python").exists():
            subprocess.run([sys.executable, str(SCRIPTS / "build_venv.py"), str(env_file(REPO / "envs", stack)),
                            str(venv)], check=True)
    return str(venv / "python")


# Processes the slow tests start side by side, as many as the smoke preset's runs: they check code
# paths, not speed, and on two cores two of them take about half the time of one after another.
AT_ONCE = yaml.safe_load((REPO / "presets" / "smoke.yaml").read_text())["measurement"]["runs_at_once"]


def side_by_side(calls):
    """{key: what calls[key]() returned, or the exception it raised}, AT_ONCE calls at a time (each
    starting a process and waiting for it)."""
    def outcome(call):
        try:
            return call()
        except Exception as err:  # noqa: BLE001 (handed to the test that reads this key)
            return err

    with ThreadPoolExecutor(AT_ONCE) as pool:
        return dict(zip(calls, pool.map(outcome, calls.values())))


def outcome_of(outcomes, key):
    """What side_by_side's call for key returned; its exception raised here, in the test that reads it."""
    if isinstance(outcomes[key], Exception):
        raise outcomes[key]
    return outcomes[key]


# What starts a training run or builds an environment: the slow tests'. (A fixture built on one of
# these, such as test_workflow's `finished`, names it among a test's fixtures too.)
TRAINING_FIXTURES = {"smoke_run", "smoke_data", "memory_pass"}


# The slow groups that took longest (worker seconds, `--durations`), handed out first: pytest-xdist
# gives a free worker the next group in the order of the items (pytest.ini: --no-loadscope-reorder;
# its default orders groups by their number of tests, which left the SLURM test's 5 and the memory
# pass's 6 for last, one beside the other: 412 and 360 s at the end of a 27-minute suite).
LONGEST_FIRST = ("smoke-run", "test_memory", "test_slurm", "test_faults", "test_parity", "test_modes", "test_inputs")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the groups
def pytest_collection_modifyitems(config, items):
    """pytest-xdist (pytest.ini: --dist loadgroup) sends each group to one worker: a module's slow
    tests are a group, so that its module-scoped runs are made once, and the slow tests of the
    modules that read the session's smoke run are one group, so that it runs once. Quick tests
    share nothing costly: each goes to whichever worker is free, after the slow groups (the
    longest first, LONGEST_FIRST), so that the last to finish are short."""
    smoke_modules = {item.module.__name__ for item in items if "smoke_run" in item.fixturenames}
    groups = {}
    for item in items:
        if item.get_closest_marker("slow") is not None:
            module = item.module.__name__
            groups[item] = "smoke-run" if module in smoke_modules else module
            item.add_marker(pytest.mark.xdist_group(groups[item]))

    turns = {group: turn for turn, group in enumerate(LONGEST_FIRST)}
    quick = len(LONGEST_FIRST) + 1
    # stable: each group's tests keep their order
    items.sort(key=lambda item: turns.get(groups[item], len(LONGEST_FIRST)) if item in groups else quick)


# The environments' shared libraries kept in memory while slow tests run (tests/resident.py), once the
# selection holds a slow test: by one process (the page cache is the machine's), the first pytest-xdist
# worker or the only process. KEPT: this process's tests/resident.Resident; WORKERS_KEPT: what each
# worker said it kept (the pytest-xdist controller's).
KEPT = {}
WORKERS_KEPT = []


def pytest_collection_finish(session):
    first = os.environ.get("PYTEST_XDIST_WORKER", "gw0") == "gw0"
    if first and any(item.get_closest_marker("slow") is not None for item in session.items):
        KEPT["resident"] = resident.keep_in_memory([Path(sys.prefix) / "lib"], VENV_PREFIX)


def kept_in_memory():
    """What this process kept in memory, in words; None where it kept nothing (no slow test)."""
    if "resident" not in KEPT:
        return None
    kept = KEPT["resident"]
    return (f"{kept.locked_bytes / 2 ** 30:.1f} GiB of the environments' shared libraries kept in memory"
            + (f" (then stopped: {kept.stopped})" if kept.stopped else ""))


def pytest_sessionfinish(session):
    if hasattr(session.config, "workeroutput"):  # a pytest-xdist worker: to the controller's summary
        session.config.workeroutput["kept_in_memory"] = kept_in_memory()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    kept = getattr(node, "workeroutput", {}).get("kept_in_memory")
    WORKERS_KEPT.append(kept and f"{node.gateway.id}: {kept}")


def pytest_terminal_summary(terminalreporter):
    for line in filter(None, WORKERS_KEPT or [kept_in_memory()]):
        terminalreporter.write_line(line)


@pytest.fixture(autouse=True)
def quick_tests_train_nothing(request, monkeypatch):
    """A test not marked slow runs with the harness refusing to start (and venv_python refusing a
    framework), so that `pytest -m "not slow"` starts no training, whatever a test calls."""
    if request.node.get_closest_marker("slow") is None:
        monkeypatch.setenv(NO_TRAINING, f"{request.node.nodeid} is not marked slow")


def copy_workflow(dest):
    """The repository's tracked files in a fresh folder, as a new clone would have them."""
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.splitlines()
    for name in files:
        if (REPO / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dest / name)
    return dest


@pytest.fixture(scope="session")
def workflow_copy(tmp_path_factory):
    return copy_workflow(tmp_path_factory.mktemp("workflow"))


# What the report's scripts import (envs/report.yaml), and the workflow's CLI: a quick test's calls run
# as processes forked from a warm interpreter that has imported them once (tests/warm_python.py).
REPORT_LIBRARIES = ("numpy", "pandas", "scipy.special", "scipy.stats", "matplotlib", "matplotlib.pyplot", "seaborn")
SNAKEMAKE_LIBRARIES = ("snakemake.cli", "snakemake.report", "smart_open", "jsonschema")
TEST_LIBRARIES = ("numpy", "pandas", "scipy.special", "scipy.stats")


def report_python(*args, **kwargs):
    """subprocess.run([the report env's interpreter, *args], **kwargs): a script of the report, or
    -c CODE, in a process of its own (forked from the warm interpreter of the report env)."""
    return warm_python.run([venv_python("report"), *args], preload=REPORT_LIBRARIES, **kwargs)


def own_python(*args, **kwargs):
    """subprocess.run([this interpreter, *args], **kwargs), forked from its warm interpreter."""
    return warm_python.run([sys.executable, *args], preload=TEST_LIBRARIES, **kwargs)


def snakemake(*args, cwd=REPO, check=True):
    """Run the snakemake CLI of this interpreter; return the completed process. A dry run (-n), and
    whatever a quick test runs, takes seconds: it is forked from the warm interpreter; a slow test's
    invocation, whose jobs train for minutes, is started as a process of its own."""
    cmd = [sys.executable, "-m", "snakemake", *args]
    if os.environ.get(NO_TRAINING) or "-n" in args:
        proc = warm_python.run(cmd, preload=SNAKEMAKE_LIBRARIES, cwd=cwd, capture_output=True, text=True)
    else:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}")
    return proc


# The prepared data of the smoke preset that the framework tests' specs read.
SMOKE_DATA = ("results/data/mnist/train-duplicate~1-images.npy", "results/data/imdb/train-sequences.npy",
              "results/data/chestxray/264/pillow-simd-jpeg.csv")


SMOKE_CONSOLE = "smoke-run-console.txt"


@pytest.fixture(scope="session")
def smoke_run(workflow_copy):
    """The session's one smoke run (presets/smoke.yaml, in the session's workflow copy) and its
    report: every test that reads the workflow's records and tables reads them here."""
    proc = snakemake("--cores", "2", "--configfile", "presets/smoke.yaml", cwd=workflow_copy)
    (workflow_copy / SMOKE_CONSOLE).write_text(proc.stderr)   # what its terminal said (tests/test_console.py)
    failed = failed_runs(proc.stderr)
    # A failed run would fail most of the tests that read the run (its record, its tables, the
    # reruns it plans), each in its own words: they all stop here instead, on what failed.
    assert not failed, "the smoke run's failed runs:\n" + "\n".join(
        f"{run}\n{log_end(workflow_copy / log, workflow_copy / run)}" for run, log in failed)
    snakemake("--report", "results/report.html", "--configfile", "presets/smoke.yaml", cwd=workflow_copy)
    return workflow_copy


def run_log(record):
    """The log of the run whose record is `record` (relative to the workflow: rules/runs.smk's log)."""
    return record.replace("results/runs/", "results/logs/runs/", 1).removesuffix(".json") + ".log"


def failed_runs(stderr):
    """(record, log) of each run an invocation's summary says failed (rules/lifecycle.smk, report_runs)."""
    return re.findall(r"^  failed: (\S+) \(log: (.+)\)$", stderr, flags=re.MULTILINE)


def log_end(log, record, lines=30):
    """A failed run's log's last lines, or its record's error where it has no log."""
    if log.is_file():
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    return json.loads(record.read_text()).get("error") or f"(neither a log nor an error: {record})"


def smoke_records(root, run_set, framework):
    """The records of a run set's runs of one framework in a workflow folder, each validated
    against schemas/run.schema.json."""
    return load_records(sorted((root / "results" / "runs" / run_set / framework).glob("*.json")))


@pytest.fixture(scope="session")
def smoke_data(workflow_copy):
    """The session's workflow copy with the smoke preset's data prepared: where the framework
    tests run their specs (relative paths under results/data)."""
    snakemake(*SMOKE_DATA, "--cores", "2", "--configfile", "presets/smoke.yaml", cwd=workflow_copy)
    return workflow_copy
