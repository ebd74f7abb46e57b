"""Bring your own environment (config interpreters): a stack runs in an interpreter the user has
(a cluster's module or container), nothing is built for it, its versions are recorded as a venv's
are and the record says whose it was; the private-API guards stop naming both versions, or run
under the recorded override (config private_api_override)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dlbench import frameworks
from dlbench.envs import env_hash, interpreter_error, running_interpreter
from dlbench.frameworks import PRIVATE_API_OVERRIDE, UnknownVersion, check_written_for
from dlbench.tables import environment_rows, load_records
from conftest import REPO, copy_workflow, run_log, snakemake, venv_python
from test_faults import SMALL, SMOKE, write_idx_digits
from test_tables import record, result, spec, write_records

STACKS = sorted(path.stem for path in (REPO / "envs").glob("*.yaml"))


def your_interpreter(folder, stack):
    """An interpreter of the user's own, not built from an env file: a fresh venv of the same Python
    that sees a built venv's packages through a .pth file, as a cluster's module extends the path."""
    built = Path(venv_python(stack)).parent
    subprocess.run([str(built / "bin" / "python"), "-m", "venv", "--without-pip", str(folder)], check=True)
    [site_packages] = folder.glob("lib/python*/site-packages")
    [theirs] = built.glob("lib/python*/site-packages")
    (site_packages / "packages.pth").write_text(f"{theirs}\n")
    return folder / "bin" / "python"


def frozen(stack):
    """{package: version} of a built venv's pip freeze."""
    text = (Path(venv_python(stack)).parent / "pip-freeze.txt").read_text()
    return {name.lower(): version for name, _, version in (line.partition("==") for line in text.splitlines()) if version}


def test_the_stacks_are_the_env_files_and_are_not_listed_again():
    """A new framework's env file makes it a stack: no schema lists the stacks (test_specs)."""
    schema = yaml.safe_load((REPO / "schemas" / "config.schema.yaml").read_text())
    assert "properties" not in schema["properties"]["interpreters"]
    assert "pytorch" in STACKS and "data" in STACKS and "gpu" not in STACKS


def test_an_interpreter_that_cannot_run_is_named_with_why(tmp_path):
    not_executable = tmp_path / "python"
    not_executable.write_text("")
    assert interpreter_error(sys.executable) is None
    assert interpreter_error(str(tmp_path / "nowhere")) == f"{tmp_path / 'nowhere'} does not exist"
    assert interpreter_error("python3").startswith("python3 does not exist (a path, not a command's name")
    assert interpreter_error(str(tmp_path)) == f"{tmp_path} is not a file"
    assert interpreter_error(str(not_executable)) == f"{not_executable} is not executable"


def test_the_running_interpreter_says_whether_an_env_file_built_it(tmp_path, monkeypatch):
    venv = tmp_path / "pytorch-0123456789ab"
    venv.mkdir()
    monkeypatch.setattr(sys, "prefix", str(venv))
    assert running_interpreter()["kind"] == "user"
    (venv / "env.yaml").write_text("name: x\n")
    (venv / "pip-freeze.txt").write_text("")
    assert running_interpreter() == {"kind": "venv", "executable": sys.executable, "prefix": str(venv),
                                     "env_file_hash": env_hash(venv / "env.yaml")}
    conda = tmp_path / "conda" / "abcdef12_"
    conda.mkdir(parents=True)
    (tmp_path / "conda" / "abcdef12_.env_setup_done").write_text("")
    monkeypatch.setattr(sys, "prefix", str(conda))
    assert running_interpreter()["kind"] == "conda"


@pytest.mark.parametrize("stack, make, why", [
    ("pytorch", lambda tmp: tmp / "nowhere" / "python", "{path} does not exist"),
    ("pytorch", lambda tmp: (tmp / "python").write_text("") or tmp / "python", "{path} is not executable"),
    ("pytorh", lambda tmp: Path(sys.executable), "no stack of that name (an env file's name: chainer, data,"),
], ids=["missing", "not-executable", "unknown-stack"])
def test_a_bad_interpreter_stops_the_workflow_naming_the_key_and_path_before_anything_runs(tmp_path, stack, make,
                                                                                            why):
    workflow = copy_workflow(tmp_path / "workflow")
    path = make(tmp_path)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"interpreters": {stack: str(path)}}))
    proc = snakemake(SMALL, "--cores", "1", *SMOKE, str(config), cwd=workflow, check=False)
    assert proc.returncode != 0
    assert f"config interpreters.{stack}: {why.format(path=path)}" in proc.stdout + proc.stderr, proc.stderr[-3000:]
    assert not (workflow / "results").exists()


def test_every_stack_in_your_interpreter_plans_no_environment_build(tmp_path, workflow_copy):
    """The default plan, every stack in the driver's interpreter and an empty venv prefix: no
    venv is built, and every job runs the interpreter it was given."""
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"venv_prefix": str(tmp_path / "venvs"),
                                      "interpreters": {stack: sys.executable for stack in STACKS}}))
    planned = snakemake("-n", "--configfile", str(config), cwd=workflow_copy).stdout
    assert "build_venv" not in planned and str(tmp_path / "venvs") not in planned
    assert f"exec {sys.executable} -m dlbench.harness" in planned


def test_the_guard_stops_naming_both_versions_or_runs_under_the_override_and_says_so(monkeypatch, capsys):
    monkeypatch.delenv(PRIVATE_API_OVERRIDE, raising=False)
    monkeypatch.setattr(frameworks, "PRIVATE_API_OVERRIDES", [])
    module = str(REPO / "src" / "dlbench" / "frameworks" / "keras" / "internals.py")
    with pytest.raises(UnknownVersion, match=r"^dlbench/frameworks/keras/internals.py: uses keras 3.15.1's private API "
                                             r".* has keras 3.16.0: .* private_api_override: true"):
        check_written_for(module, "keras", "3.16.0", "3.15.1")
    monkeypatch.setenv(PRIVATE_API_OVERRIDE, "0")  # the workflow's value for false
    with pytest.raises(UnknownVersion):
        check_written_for(module, "keras", "3.16.0", "3.15.1")
    assert frameworks.PRIVATE_API_OVERRIDES == []
    monkeypatch.setenv(PRIVATE_API_OVERRIDE, "1")
    check_written_for(module, "keras", "3.16.0", "3.15.1")
    check_written_for(module, "keras", "3.16.0", "3.15.1")  # imported again: listed once
    used = {"module": "dlbench/frameworks/keras/internals.py", "package": "keras", "found": "3.16.0",
            "written_for": "3.15.1"}
    assert frameworks.PRIVATE_API_OVERRIDES == [used]
    assert ("private API override: dlbench/frameworks/keras/internals.py was written for keras 3.15.1 and runs on "
            "keras 3.16.0") in capsys.readouterr().err


def test_the_record_and_the_environment_table_say_the_interpreter_and_the_override(tmp_path):
    used = {"module": "dlbench/frameworks/keras/internals.py", "package": "keras", "found": "3.16.0",
            "written_for": "3.15.1"}
    overridden = record(spec(), {**result(3.0, 1.0), "private_api_overrides": [used]}, 0, [], "now", 5.0)
    plain = record(spec(), result(3.0, 1.0), 0, [], "now", 5.0)
    records = load_records(write_records(tmp_path, overridden, plain))  # valid against schemas/run.schema.json
    assert records[0]["environment"]["private_api_overrides"] == [used]
    assert records[1]["environment"]["private_api_overrides"] == []
    assert records[0]["environment"]["interpreter"] == running_interpreter()  # the pytest interpreter: user
    env = environment_rows(records)
    assert sorted(env["private_api_override"]) == [
        "", "keras 3.16.0, written for 3.15.1 (dlbench/frameworks/keras/internals.py)"]
    assert set(env["interpreter"]) == {"user"} and set(env["interpreter_path"]) == {sys.executable}


def planned_jobs(stdout):
    """{rule: count} of a dry run's job stats."""
    stats = stdout.split("Job stats:")[1].split("\n\n")[0].splitlines()[3:]
    return {name: int(count) for name, count in (line.split() for line in stats) if name != "total"}


@pytest.mark.slow  # prepares MNIST and trains a small model twice
def test_a_stack_in_your_interpreter_runs_is_recorded_reruns_alone_and_moves(tmp_path):
    """PyTorch in an interpreter inside the clone (a relative path), the data stack in one outside it,
    no venv prefix to build in: nothing is built, the jobs run in them, the record holds the
    interpreter's packages and says it was the user's. Another PyTorch interpreter reruns the
    training and nothing else; the clone moved, results and all, plans nothing and still runs."""
    before = copy_workflow(tmp_path / "before")
    pytorch = your_interpreter(before / "my-pytorch", "pytorch")
    data = your_interpreter(tmp_path / "my-data", "data")
    mnist = write_idx_digits(tmp_path / "mnist")

    def configured(pytorch_path):
        config = tmp_path / "config.yaml"
        config.write_text(yaml.safe_dump({
            "venv_prefix": str(tmp_path / "no-venvs"), "interpreters": {"pytorch": pytorch_path, "data": str(data)},
            "mnist": {"source": {"kind": "idx", "location": str(mnist)}}}))
        return str(config)

    config = configured("my-pytorch/bin/python")
    planned = snakemake(SMALL, "-n", *SMOKE, config, cwd=before).stdout
    assert "build_venv" not in planned
    assert "exec my-pytorch/bin/python -m dlbench.harness" in planned
    assert f"{data} src/dlbench/workloads/mnist/scripts/prepare.py prepare" in planned
    snakemake(SMALL, "--cores", "2", *SMOKE, config, cwd=before)
    assert not (tmp_path / "no-venvs").exists()
    run = json.loads((before / SMALL).read_text())
    assert run["status"] == "ok", run["error"]
    assert run["environment"]["interpreter"] == {"kind": "user", "executable": str(pytorch),
                                                 "prefix": str(before / "my-pytorch"), "env_file_hash": None}
    packages = run["environment"]["packages"]
    assert {name: packages.get(name) for name in ("torch", "numpy", "psutil")} == {
        name: frozen("pytorch")[name] for name in ("torch", "numpy", "psutil")}
    assert run["environment"]["private_api_overrides"] == []

    # another interpreter for pytorch: its training runs again, the data stack's jobs do not
    again = snakemake(SMALL, "-n", *SMOKE, configured("my-pytorch/bin/python3"), cwd=before).stdout
    assert planned_jobs(again) == {"train": 1}, again[-3000:]
    config = configured("my-pytorch/bin/python")

    after = tmp_path / "elsewhere" / "after"
    after.parent.mkdir()
    before.rename(after)
    assert "Nothing to be done" in snakemake(SMALL, "-n", *SMOKE, config, cwd=after).stdout
    snakemake(SMALL, "--cores", "2", *SMOKE, config, "--forcerun", "train", cwd=after)
    run = json.loads((after / SMALL).read_text())
    assert run["status"] == "ok", run["error"]
    assert run["environment"]["interpreter"]["executable"] == str(after / "my-pytorch" / "bin" / "python")


JAX_SMALL = SMALL.replace("/pytorch/", "/jax/").replace("mode~eager", "mode~jit")


@pytest.mark.slow  # prepares MNIST and trains JAX's small model twice
def test_a_version_the_private_api_was_not_written_for_fails_the_run_or_runs_under_the_recorded_override(tmp_path):
    """JAX's internals module, in a copy, says it was written for another version: the run fails
    naming both; with private_api_override the next invocation runs it again and it goes on, its record and
    the environment table naming both versions."""
    workflow = copy_workflow(tmp_path / "workflow")
    internals = workflow / "src" / "dlbench" / "frameworks" / "jax" / "internals.py"
    text = internals.read_text()
    assert 'WRITTEN_FOR = {"jax": "0.10.2",' in text
    internals.write_text(text.replace('WRITTEN_FOR = {"jax": "0.10.2",', 'WRITTEN_FOR = {"jax": "0.9.0",'))
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"mnist": {"source": {"kind": "idx", "location": str(write_idx_digits(tmp_path / "mnist"))}}}))
    snakemake(JAX_SMALL, "--cores", "2", *SMOKE, str(config), cwd=workflow)
    run = json.loads((workflow / JAX_SMALL).read_text())
    assert run["status"] == "failed"
    assert ("dlbench/frameworks/jax/internals.py: uses jax 0.9.0's private API (see that file's docstring for what each "
            "use works around), but this environment has jax 0.10.2") in run["error"], run["error"]
    snakemake(JAX_SMALL, "--cores", "2", *SMOKE, str(config), "--config", "private_api_override=True", cwd=workflow)
    run = json.loads((workflow / JAX_SMALL).read_text())
    assert run["status"] == "ok", run["error"]
    assert run["environment"]["private_api_overrides"] == [
        {"module": "dlbench/frameworks/jax/internals.py", "package": "jax", "found": "0.10.2", "written_for": "0.9.0"}]
    log = (workflow / run_log(JAX_SMALL)).read_text()
    assert "private API override: dlbench/frameworks/jax/internals.py was written for jax 0.9.0 and runs on jax 0.10.2" in log
    [env] = environment_rows(load_records([workflow / JAX_SMALL])).to_dict("records")
    assert env["private_api_override"] == "jax 0.10.2, written for 0.9.0 (dlbench/frameworks/jax/internals.py)"
    assert env["interpreter"] == "venv"
