"""The compile cache (measurement.compile_cache) through the real harness: the repeat that compiles
cold starts from an empty folder of the point's and fills it, a later repeat loads every program from
it and compiles none, and each framework's cache is the point's, never the framework's default one.
The same records time their start-up step by step (dlbench.protocol.startup_seconds)."""
import json
import subprocess

import pytest

from conftest import side_by_side, outcome_of, venv_python
from specs import smoke_spec
from dlbench.specs import spec_to_json

pytestmark = pytest.mark.slow


def run(workdir, folder, framework, mode, repeat):
    """The record of one harness run of MNIST's point in `mode`, repeat `repeat`."""
    spec = smoke_spec("mnist", framework, repeat=repeat, mode=mode)
    out = folder / f"{framework}-{mode}-{repeat}.json"
    proc = subprocess.run([venv_python(framework), "-m", "dlbench.harness", "--spec", spec_to_json(spec),
                           "--out", str(out)], cwd=workdir, capture_output=True, text=True, check=False)
    record = json.loads(out.read_text())
    assert record["status"] == "ok", (record["error"] or "") + proc.stderr[-2000:]
    return record


@pytest.fixture(scope="module")
def caches(smoke_data, tmp_path_factory):
    """Each framework's repeats one after another (repeat 1, 2, then 1 again); the frameworks side by side."""
    folder = tmp_path_factory.mktemp("compile-cache")
    sequences = {("jax", "jit"): (1, 2, 1), ("tensorflow", "xla"): (1, 2), ("pytorch", "compile"): (1,)}

    def repeats(framework, mode):
        return [run(smoke_data, folder, framework, mode, repeat) for repeat in sequences[framework, mode]]

    records = side_by_side({key: lambda key=key: repeats(*key) for key in sequences})
    return smoke_data, records, {key: [r["compile_cache"] for r in value] if isinstance(value, list) else value
                                 for key, value in records.items()}


@pytest.mark.parametrize("framework, mode", [("jax", "jit"), ("tensorflow", "xla"), ("pytorch", "compile")])
def test_repeat_1_compiles_cold_into_the_points_folder(caches, framework, mode):
    workdir, _, outcomes = caches
    first = outcome_of(outcomes, (framework, mode))[0]
    folder = first["directory"]
    assert first["fill"] and first["files_before"] == 0
    assert folder.startswith(f"results/cache/compile/mnist/{framework}/") and folder.endswith(f"mode~{mode}_precision~float32")
    # the framework wrote there (PyTorch's Inductor not in its default /tmp/torchinductor_<user>)
    assert first["files_after"] > 0 and any((workdir / folder).rglob("*"))
    assert any(folder in str(value) for value in first["settings"].values()), first["settings"]


@pytest.mark.parametrize("framework, mode", [("jax", "jit"), ("tensorflow", "xla")])
def test_a_later_repeat_loads_every_program_and_compiles_none(caches, framework, mode):
    first, second = outcome_of(caches[2], (framework, mode))[:2]
    assert not second["fill"] and second["directory"] == first["directory"]
    assert second["files_before"] == second["files_after"] == first["files_after"]


def test_repeat_1_run_again_empties_the_folder_first(caches):
    _, second, again = outcome_of(caches[2], ("jax", "jit"))
    assert again["fill"] and again["files_before"] == 0 and again["files_after"] == second["files_after"]


@pytest.mark.parametrize("framework, mode", [("jax", "jit"), ("tensorflow", "xla"), ("pytorch", "compile")])
def test_the_record_times_the_start_up_step_by_step(caches, framework, mode):
    """Each step of the first process's start-up, none negative, all of them within the time the
    harness saw before the first block (its wall time less the blocks and the final evaluation)."""
    for record in outcome_of(caches[1], (framework, mode)):
        startup = record["startup"]
        assert set(startup) == {"interpreter_s", "framework_s", "setup_s", "build_s", "numerics_s", "first_batches_s"}
        assert min(startup.values()) >= 0
        blocks = sum(block["wall_s"] for block in record["segments"] + record["units"])
        before = record["wall_s"] - blocks - (record["final_eval_s"] or 0)
        assert sum(startup.values()) < before
        assert startup["framework_s"] > 0.1  # importing a framework takes time: the steps are where they say


def test_a_framework_that_compiles_nothing_it_can_keep_says_so():
    for framework in ("mxnet", "chainer"):
        code = f"from dlbench.frameworks import {framework} as adapter; print(adapter.compile_cache('x'))"
        proc = subprocess.run([venv_python(framework), "-c", code], capture_output=True, text=True, check=True)
        assert proc.stdout.strip() == "{}"
