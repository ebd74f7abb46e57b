"""A call forked from the warm interpreter (tests/warm_python.py) is what the quick tests take for
a started process: the same output, exit status, working directory, arguments, environment and
import path as `subprocess.run` of the same command, for a script, -c and -m."""
import subprocess
import sys

import pytest
import warm_python

from conftest import TEST_LIBRARIES

SHOW = """
import os, sys
print(os.getcwd(), sys.argv, os.environ.get("WARM_TEST"), sys.path[0], sep="\\n")
print("to stderr", file=sys.stderr)
raise SystemExit(int(sys.argv[-1]))
"""


def both(cmd, **kwargs):
    """(started, forked) results of cmd, each with its output captured as text."""
    return [run(cmd, capture_output=True, text=True, **kwargs)
            for run in (subprocess.run, lambda c, **k: warm_python.run(c, preload=TEST_LIBRARIES, **k))]


@pytest.mark.parametrize("kind", ["script", "-c", "-m"])
def test_a_forked_call_is_the_process_it_stands_for(kind, tmp_path):
    (tmp_path / "show.py").write_text(SHOW)
    program = {"script": [str(tmp_path / "show.py")], "-c": ["-c", SHOW], "-m": ["-m", "show"]}[kind]
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    env = {"WARM_TEST": "given", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)}
    started, forked = both([sys.executable, *program, "an argument", "3"], cwd=cwd, env=env)
    assert (forked.returncode, forked.stdout, forked.stderr) == (started.returncode, started.stdout, started.stderr)
    assert forked.returncode == 3 and "given" in forked.stdout and str(cwd) in forked.stdout


def test_an_uncaught_exception_exits_1_with_its_traceback(tmp_path):
    started, forked = both([sys.executable, "-c", "raise ValueError('named')"], cwd=tmp_path)
    assert forked.returncode == started.returncode == 1
    assert forked.stderr.splitlines()[-1] == started.stderr.splitlines()[-1] == "ValueError: named"


def test_a_call_imports_no_module_of_the_previous_one(tmp_path):
    """Each call is a fresh fork of the server: what one call imported, the next has not."""
    (tmp_path / "mine.py").write_text("")
    code = "import sys; print('mine' in sys.modules); import mine"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)}
    first, second = (warm_python.run([sys.executable, "-c", code], preload=TEST_LIBRARIES, capture_output=True,
                                     text=True, cwd=tmp_path, env=env) for _ in range(2))
    assert first.stdout == second.stdout == "False\n"
