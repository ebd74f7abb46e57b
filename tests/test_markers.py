"""What the quick selection (`pytest -m "not slow"`) runs: no training, no framework environment.
Every test not marked slow runs with the harness refusing to start (conftest.quick_tests_train_nothing)."""
import itertools
import json
import os
import subprocess
import sys

import pytest

import conftest
from conftest import LONGEST_FIRST, REPO, TRAINING_FIXTURES, own_python
from dlbench.harness import NO_TRAINING


def test_a_quick_test_starts_no_harness(tmp_path):
    out = tmp_path / "record.json"
    proc = subprocess.run([sys.executable, "-m", "dlbench.harness", "--spec", "{}", "--out", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode != 0 and not out.exists()
    assert "DLBENCH_NO_TRAINING is set" in proc.stderr and "test_a_quick_test_starts_no_harness" in proc.stderr


# Writes what a collection of the whole suite holds (its items after tests/conftest.py ordered and
# grouped them, before -m deselected any) and what it selected, to the file COLLECTED names.
COLLECTING_PLUGIN = """
import json
import os

import pytest

ITEMS = []


@pytest.hookimpl(tryfirst=True)  # called after conftest's (tryfirst too, registered later), before -m deselects
def pytest_collection_modifyitems(items):
    ITEMS.extend({"nodeid": item.nodeid, "module": item.module.__name__,
                  "slow": item.get_closest_marker("slow") is not None,
                  "groups": sorted(mark.args[0] for mark in item.iter_markers("xdist_group")),
                  "fixtures": sorted(item.fixturenames)} for item in items)


def pytest_collection_finish(session):
    with open(os.environ["COLLECTED"], "w") as out:
        json.dump({"collected": ITEMS, "selected": [item.nodeid for item in session.items]}, out)
"""


@pytest.fixture(scope="module")
def collection(tmp_path_factory):
    """The whole suite as `pytest -m "not slow"` collects it, in a process of its own (whatever this
    session selected): {"collected": every test, quick and slow, in the order conftest gave them,
    each with its module, whether it is slow, its xdist groups and its fixtures; "selected": the
    node ids the marker kept}. With no slow test selected, that process keeps nothing in memory
    (conftest.pytest_collection_finish)."""
    folder = tmp_path_factory.mktemp("collection")
    (folder / "collecting_plugin.py").write_text(COLLECTING_PLUGIN)
    env = {name: value for name, value in os.environ.items() if not name.startswith(("PYTEST_XDIST", "PYTEST_CURRENT"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(folder), env.get("PYTHONPATH")]))
    env["COLLECTED"] = str(folder / "collected.json")
    proc = own_python("-m", "pytest", "--collect-only", "-q", "-n", "0", "-p", "collecting_plugin", "-m", "not slow",
                      cwd=REPO, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    found = json.loads((folder / "collected.json").read_text())
    quick = [item["nodeid"] for item in found["collected"] if not item["slow"]]
    slow = [item for item in found["collected"] if item["slow"]]
    assert quick and slow, "a collection of the suite without quick or slow tests"
    assert found["selected"] == quick  # -m "not slow" keeps the quick tests, in their order
    return found["collected"]


def test_no_quick_test_asks_for_what_trains(request, collection):
    """The fixtures that train (the smoke run, its data, the memory pass) are the slow tests' only."""
    quick = [item for item in request.session.items if item.get_closest_marker("slow") is None]
    assert request.node in quick
    # of the whole suite, whatever this session selected: the slow tests that train ask for them
    assert not [item["nodeid"] for item in collection if not item["slow"] and TRAINING_FIXTURES & set(item["fixtures"])]
    asking = {fixture for item in collection if item["slow"] for fixture in TRAINING_FIXTURES & set(item["fixtures"])}
    assert asking == TRAINING_FIXTURES, "a training fixture no slow test asks for: TRAINING_FIXTURES is stale"


def test_what_a_session_shares_runs_once_on_one_worker(collection):
    """pytest-xdist's groups (tests/conftest.py), over the whole suite: every slow test of a module
    that reads the smoke run is in one group, every other slow test in its module's; quick tests are
    in none. Each kind is there to check."""
    smoke_modules = {item["module"] for item in collection if "smoke_run" in item["fixtures"]}
    quick = [item for item in collection if not item["slow"]]
    smoke = [item for item in collection if item["slow"] and item["module"] in smoke_modules]
    own = [item for item in collection if item["slow"] and item["module"] not in smoke_modules]
    assert quick and smoke and own and len(quick) + len(smoke) + len(own) == len(collection)
    assert any("smoke_run" in item["fixtures"] for item in smoke)
    assert not [item["nodeid"] for item in quick if item["groups"]]
    assert not [item["nodeid"] for item in smoke if item["groups"] != ["smoke-run"]]
    assert not [item["nodeid"] for item in own if item["groups"] != [item["module"]]]
    assert len({item["module"] for item in own}) > 1  # a group per module, not one for them all


def test_the_longest_groups_are_handed_out_first_and_the_quick_tests_last(request, collection):
    """The order pytest-xdist hands out groups in (pytest.ini: --no-loadscope-reorder): the groups
    of conftest.LONGEST_FIRST in that order, then the other slow groups, then the quick tests; each
    group's tests one after another."""
    order = [item["groups"][0] if item["groups"] else None for item in collection]
    slow = [name for name in order if name is not None]
    assert slow and len(slow) < len(order), "no slow test or no quick test collected"
    assert order[:len(slow)] == slow, "a quick test comes before a slow one"
    firsts = [name for name, _ in itertools.groupby(slow)]
    assert len(firsts) == len(set(firsts)), "a group's tests are apart"
    assert firsts[:len(LONGEST_FIRST)] == list(LONGEST_FIRST), "LONGEST_FIRST names a group that is not first, or none"
    assert "--no-loadscope-reorder" in request.config.getini("addopts")


def test_every_dry_run_forks_from_the_warm_interpreter_and_a_slow_test_s_invocation_starts_its_own(monkeypatch):
    """conftest.snakemake: -n, in a slow test too, through warm_python; a slow test's run, subprocess."""
    monkeypatch.delenv(NO_TRAINING)  # as in a slow test
    calls = []

    def record(kind):
        return lambda cmd, **kwargs: calls.append((kind, cmd[3:])) or subprocess.CompletedProcess(cmd, 0, "", "")
    monkeypatch.setattr(conftest.warm_python, "run", record("warm"))
    monkeypatch.setattr(conftest.subprocess, "run", record("started"))
    conftest.snakemake("-n", "target")
    conftest.snakemake("--cores", "2", "target")
    assert calls == [("warm", ["-n", "target"]), ("started", ["--cores", "2", "target"])]
