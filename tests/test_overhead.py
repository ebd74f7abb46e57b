"""benchmarks/overhead.py and the ChestX-ray bare loops it compares the harness with.

Quick: the arguments reach the spec both children read and their command lines (--device-kind,
--input, --python, PYTHONPATH=src), and the CSV row says the device and the input; the
children are stubbed; the loops hold only their model, step and loop (dlbench.bare the rest). Slow:
each bare loop trains a tiny DenseNet on the CPU for both input kinds and prints one JSON line per
epoch."""
import dataclasses
import importlib.util
import inspect
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import REPO, outcome_of, side_by_side, venv_python
from dlbench.specs import spec_from_dict, spec_to_json
from dlbench.workloads.chestxray.labels import PATHOLOGIES, LabelRow, write_labels_csv

SPEC = importlib.util.spec_from_file_location("overhead", REPO / "benchmarks" / "overhead.py")
overhead = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(overhead)

BARE_FRAMEWORKS = ("pytorch", "jax", "tensorflow", "mxnet")


def tiny_config(tmp_path):
    """DenseNet with dense blocks [2, 2, 2, 2] at batch 2."""
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump({"chestxray": {"blocks": [2, 2, 2, 2], "batch": 2,
                                                  "subset": {"train": 6, "valid": 2, "test": 2}}}))
    return [REPO / "config.yaml", path]


def labels_csv(path, train):
    """A prepared label file of `train` training rows (and one row each of valid and test):
    all a bare loop reads of the data."""
    row = lambda i: LabelRow(f"{i:05d}.png", i, np.zeros(len(PATHOLOGIES), np.uint8))  # noqa: E731
    write_labels_csv(path, {"train": [row(i) for i in range(train)], "valid": [row(train)], "test": [row(train + 1)]})
    return path


def arguments(tmp_path, *extra):
    return ["--workload", "chestxray", "--framework", "jax", "--configfile", *map(str, tiny_config(tmp_path)),
            *extra]


class Children:
    """Stands in for subprocess.run in overhead.py: records each command and its environment,
    and answers as the harness (a record of `harness` samples/s on `device`) or a bare loop
    (epochs of 10 samples in 10 / `bare` s) would."""

    def __init__(self, harness, bare, device):
        self.harness, self.bare, self.device, self.calls, self.bare_specs = harness, bare, device, [], []

    def __call__(self, command, **kwargs):
        self.calls.append((command, kwargs["env"]))
        if command[1:3] == ["-m", "dlbench.harness"]:
            out = Path(command[command.index("--out") + 1])
            out.write_text(json.dumps({"status": "ok", "summary": {"samples_per_s": self.harness},
                                       "devices_used": {"kind": self.device}}))
            return subprocess.CompletedProcess(command, 0, "", "")
        self.bare_specs.append(Path(command[2]).read_text())
        lines = [json.dumps({"epoch": e, "wall_s": 10 / self.bare, "samples": 10, "device_kind": self.device})
                 for e in (1, 2, 3)]
        return subprocess.CompletedProcess(command, 0, "\n".join(lines) + "\n", "")


def test_the_resident_input_and_interpreter_reach_the_spec_both_children_read(tmp_path):
    spec, python = overhead.plan(overhead.argparse.Namespace(
        workload="chestxray", framework="jax", threads=2, device_kind="gpu", input="resident", python="/opt/python3",
        configfile=tiny_config(tmp_path)))
    assert (spec.device_kind, spec.input, spec.convergence.steps) == ("gpu", "resident", 0)
    assert python == "/opt/python3"
    default, venv = overhead.plan(overhead.argparse.Namespace(
        workload="chestxray", framework="jax", threads=2, device_kind=None, input=None, python=None,
        configfile=tiny_config(tmp_path)))
    assert (default.device_kind, default.input) == ("auto", "synthetic")
    assert Path(venv).parent.name.startswith("jax-")


def test_an_input_kind_is_refused_where_the_point_has_none(tmp_path):
    with pytest.raises(SystemExit, match="no input kind"):
        overhead.plan(overhead.argparse.Namespace(workload="mnist", framework="pytorch", threads=2, device_kind=None,
                                                  input="resident", python=None, configfile=[REPO / "config.yaml"]))


def test_rounds_alternate_and_each_row_says_device_and_input(tmp_path, monkeypatch, capsys):
    children = Children(harness=97.0, bare=100.0, device="gpu")
    monkeypatch.setattr(overhead.subprocess, "run", children)
    out = tmp_path / "overhead.csv"
    overhead.main(arguments(tmp_path, "--device-kind", "gpu", "--input", "resident", "--python", "/opt/python3",
                            "--rounds", "2", "--epochs", "3", "--out", str(out)))
    kinds = ["harness" if command[1:3] == ["-m", "dlbench.harness"] else "bare" for command, _ in children.calls]
    assert kinds == ["harness", "bare", "bare", "harness"]  # ABBA
    for command, env in children.calls:
        assert command[0] == "/opt/python3"
        assert env["PYTHONPATH"].split(":")[0] == str(REPO / "src")
    bare_command = children.calls[1][0]
    assert bare_command[1] == str(REPO / "benchmarks/bare/chestxray_jax.py")
    assert bare_command[3] == "3"
    harness_spec = spec_from_dict(json.loads(children.calls[0][0][children.calls[0][0].index("--spec") + 1]))
    bare_spec = spec_from_dict(json.loads(children.bare_specs[0]))
    assert harness_spec == bare_spec
    assert (bare_spec.device_kind, bare_spec.input) == ("gpu", "resident")
    rows = out.read_text().splitlines()
    assert rows[0] == "workload,framework,device_kind,input,gpu_float32,round,harness_per_s,bare_per_s,ratio"
    assert rows[1:] == [f"chestxray,jax,gpu,resident,highest,{r},97.000,100.000,0.9700" for r in (1, 2)]
    assert "harness / bare 0.970 (median of 2 rounds" in capsys.readouterr().out


def test_a_bare_loop_on_another_device_than_the_harness_is_no_comparison(tmp_path, monkeypatch):
    children = Children(harness=97.0, bare=100.0, device="gpu")

    def bare_on_cpu(command, **kwargs):
        result = children(command, **kwargs)
        return subprocess.CompletedProcess(command, 0, result.stdout.replace('"gpu"', '"cpu"'), "")
    monkeypatch.setattr(overhead.subprocess, "run", bare_on_cpu)
    with pytest.raises(SystemExit, match="the harness ran on the gpu, the bare loop on the cpu"):
        overhead.main(arguments(tmp_path, "--rounds", "1", "--python", sys.executable))


@pytest.fixture(scope="module")
def bare_runs(tmp_path_factory):
    """Each framework's bare loop for both input kinds on the CPU: 2 epochs of 3 steps of a
    batch of 2 on a tiny DenseNet ({(framework, input): the JSON lines it printed})."""
    tmp_path = tmp_path_factory.mktemp("bare")
    labels = labels_csv(tmp_path / "labels.csv", train=6)
    calls = {}
    for framework in BARE_FRAMEWORKS:
        for kind in overhead.INPUTS:
            spec, _ = overhead.plan(overhead.argparse.Namespace(
                workload="chestxray", framework=framework, threads=1, device_kind="cpu", input=kind, python=None,
                configfile=tiny_config(tmp_path)))
            spec = dataclasses.replace(spec, data=dataclasses.replace(spec.data, labels=str(labels)))
            spec_file = tmp_path / f"{framework}-{kind}.json"
            spec_file.write_text(spec_to_json(spec))
            command = [venv_python(framework), str(overhead.bare_loop("chestxray", framework)), str(spec_file), "2"]
            calls[framework, kind] = lambda command=command: subprocess.run(
                command, cwd=REPO, capture_output=True, text=True, timeout=900)
    return side_by_side(calls)


@pytest.mark.slow
@pytest.mark.parametrize("kind", overhead.INPUTS)
@pytest.mark.parametrize("framework", BARE_FRAMEWORKS)
def test_the_bare_loop_trains_on_the_cpu_from_either_input(bare_runs, framework, kind):
    proc = outcome_of(bare_runs, (framework, kind))
    assert proc.returncode == 0, proc.stderr[-3000:]
    print(proc.stdout)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [line["epoch"] for line in lines] == [1, 2]
    for line in lines:
        assert line["samples"] == 6 and line["wall_s"] > 0
        assert (line["device_kind"], line["input"]) == ("cpu", kind)


# What dlbench.bare does for every loop, written in none: its command line and spec, the framework's
# threads, float32 policy and seed, the clock
PREAMBLE = ("sys.argv", "spec_from_dict", "import time", "perf_counter", "json.dumps", "gpu_float32",
            "set_num_threads", "parallelism_threads", "OMP_NUM_THREADS", "NPROC", "manual_seed", "set_random_seed",
            "random.seed", "read_labels_csv", "np.load")


def test_every_bare_loop_holds_only_its_model_step_and_loop():
    """Each bare loop starts with dlbench.bare.start, which sets its framework up as the harness's
    adapter does (on a GPU the run's float32 policy, by the adapter's own gpu_float32), and times its
    epochs on dlbench.bare.EpochClock (dlbench.clock's); none writes that preamble again."""
    from dlbench import bare

    loops = sorted((REPO / "benchmarks" / "bare").glob("*.py"))
    assert len(loops) == 10
    for loop in loops:
        framework = loop.stem.split("_", 1)[1]
        text = loop.read_text()
        assert f'bare.start("{framework}")' in text and "bare.EpochClock(" in text, loop
        assert [line for line in PREAMBLE if line in text] == [], loop
    for framework, setup in bare.FRAMEWORKS.items():
        text = inspect.getsource(setup)
        assert f"from dlbench.frameworks.{framework} import gpu_float32" in text, framework
        assert "gpu_float32(spec.gpu_float32)" in text, framework
