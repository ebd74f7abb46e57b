"""What the quick selection (`pytest -m "not slow"`) runs: no training, no framework environment.
Every test not marked slow runs with the harness refusing to start (conftest.quick_tests_train_nothing)."""
import itertools
import subprocess
import sys

import conftest
from conftest import LONGEST_FIRST, TRAINING_FIXTURES
from dlbench.harness import NO_TRAINING


def test_a_quick_test_starts_no_harness(tmp_path):
    out = tmp_path / "record.json"
    proc = subprocess.run([sys.executable, "-m", "dlbench.harness", "--spec", "{}", "--out", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode != 0 and not out.exists()
    assert "DLBENCH_NO_TRAINING is set" in proc.stderr and "test_a_quick_test_starts_no_harness" in proc.stderr


def test_no_quick_test_asks_for_what_trains(request):
    """The fixtures that train (the smoke run, its data, the memory pass) are the slow tests' only."""
    quick = [item for item in request.session.items if item.get_closest_marker("slow") is None]
    assert request.node in quick
    assert not [item.nodeid for item in quick if TRAINING_FIXTURES & set(item.fixturenames)]


def test_what_a_session_shares_runs_once_on_one_worker(request):
    """pytest-xdist's groups (tests/conftest.py), over the tests collected with this one: every slow
    test that reads the smoke run is in one group, every other slow test in its module's (unless its
    module reads the smoke run); quick tests are in none."""
    groups = {item.nodeid: {mark.args[0] for mark in item.iter_markers("xdist_group")} for item in request.session.items}
    for item in request.session.items:
        slow = item.get_closest_marker("slow") is not None
        if not slow:
            assert groups[item.nodeid] == set(), item.nodeid
        elif "smoke_run" in item.fixturenames:
            assert groups[item.nodeid] == {"smoke-run"}, item.nodeid
    smoke_modules = {item.module.__name__ for item in request.session.items if "smoke_run" in item.fixturenames}
    for item in request.session.items:
        if item.get_closest_marker("slow") is not None and item.module.__name__ not in smoke_modules:
            assert groups[item.nodeid] == {item.module.__name__}, item.nodeid


def test_the_longest_groups_are_handed_out_first_and_the_quick_tests_last(request):
    """The order pytest-xdist hands out groups in (pytest.ini: --no-loadscope-reorder): the groups
    of conftest.LONGEST_FIRST in that order, then the other slow groups, then the quick tests; each
    group's tests one after another."""
    def group(item):
        return next((mark.args[0] for mark in item.iter_markers("xdist_group")), None)

    order = [group(item) for item in request.session.items]
    slow = [name for name in order if name is not None]
    assert order[:len(slow)] == slow, "a quick test comes before a slow one"
    firsts = [name for name, _ in itertools.groupby(slow)]
    assert len(firsts) == len(set(firsts)), "a group's tests are apart"
    listed = [name for name in LONGEST_FIRST if name in firsts]
    assert firsts[:len(listed)] == listed
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
