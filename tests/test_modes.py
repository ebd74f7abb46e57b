"""Every execution mode of every framework (dlbench.frameworks: a run's `mode`) trains the
smoke config with falling loss from the shared start, and its record says the mode and the
compilation it took (summary.compile_s). The default modes run in the workflow's smoke runs
(tests/test_workflow.py); here, every other one, on MNIST's CNN and IMDB's LSTM, and the
memory-saving ones (they recompute DenseNet's dense layers) on the smoke preset's DenseNet-21 too."""
import dataclasses
import subprocess

import pytest

from dlbench.frameworks import FRAMEWORKS, RECOMPUTING
from dlbench.spec_types import CompileCache
from dlbench.specs import spec_to_json
from dlbench.tables import load_records
from conftest import outcome_of, side_by_side, venv_python
from specs import smoke_spec

OTHER_MODES = [(framework, mode) for framework, definition in FRAMEWORKS.items()
               for mode, _ in definition.modes[1:]]
# The CNNs' memory format: an LSTM has no channels. The memory-saving modes recompute DenseNet's
# dense layers: the CNN and the LSTM have none.
NOT_APPLICABLE = {("pytorch", "channels-last", "imdb"),
                  *((framework, mode, workload) for framework, mode in RECOMPUTING.items()
                    for workload in ("mnist", "imdb"))}
# torch.compile of an LSTM: Dynamo does not trace nn.LSTM (torch 2.13: it runs eagerly) and
# Keras' LSTM on torch compiles for minutes on two cores; both compile the CNN above.
LEFT_OUT = {("imdb", "pytorch", "compile"), ("imdb", "keras-torch", "jit")}
# ChestX-ray smoke: DenseNet-21 at batch 2, on real input (on synthetic input, random images and
# labels, its loss does not fall in 5 steps: tests/test_workflow.py)
CASES = [(workload, framework, mode) for framework, mode in OTHER_MODES for workload in ("mnist", "imdb")
         if (workload, framework, mode) not in LEFT_OUT] + [
    ("chestxray", framework, mode) for framework, mode in RECOMPUTING.items()]
ROWS = {"chestxray": {"input": "real"}}


def train(workload, framework, mode, workdir, out):
    # its compiled programs in a folder of the run's own: the point's, in the session's smoke-data
    # folder, is tests/test_compile_cache.py's, which empties it (repeat 1) on the other worker
    spec = dataclasses.replace(smoke_spec(workload, framework, mode=mode, **ROWS.get(workload, {})),
                               compile_cache=CompileCache(directory=None, fill=True))
    proc = subprocess.run([venv_python(framework), "-m", "dlbench.harness", "--spec", spec_to_json(spec),
                           "--out", str(out)], cwd=workdir, capture_output=True, text=True, check=False)
    assert out.exists(), proc.stderr[-3000:]
    (record,) = load_records([out])  # validated against schemas/run.schema.json
    return record


@pytest.fixture(scope="module")
def mode_records(smoke_data, tmp_path_factory):
    """Every case's record (or the error its run raised), the runs side by side."""
    folder = tmp_path_factory.mktemp("modes")
    return side_by_side({case: lambda case=case: train(*case, smoke_data, folder / f"{'-'.join(case)}.json")
                         for case in CASES})


@pytest.mark.slow
@pytest.mark.parametrize("workload, framework, mode", CASES)
def test_every_mode_trains_the_smoke_config_with_falling_loss(framework, mode, workload, mode_records):
    record = outcome_of(mode_records, (workload, framework, mode))
    assert record["spec"]["mode"] == mode and f"_mode~{mode}_" in record["run_id"]
    if (framework, mode, workload) in NOT_APPLICABLE:
        assert record["status"] == "not_applicable" and mode in record["error"], record["error"]
        return
    assert record["status"] == "ok", record["error"]
    assert record["initial_weights"]["source"] == "shared"
    losses = [block["loss"] for block in record["segments"] + record["units"]]
    assert losses[-1] < losses[0], losses
    assert record["summary"]["compile_s"] is not None and record["summary"]["samples_per_s"] > 0


@pytest.mark.slow
def test_keras_records_the_jit_compile_it_resolved_and_refuses_xla_under_mirrored(mode_records, smoke_data, tmp_path):
    for framework, mode in (("keras-jax", "no-jit"), ("keras-tensorflow", "jit")):
        record = outcome_of(mode_records, ("mnist", framework, mode))
        assert record["status"] == "ok" and record["extra"]["jit_compile"] is (mode == "jit")
    spec = smoke_spec("mnist", "keras-tensorflow", mode="jit", devices=2, strategy="mirrored")
    out = tmp_path / "mirrored.json"
    subprocess.run([venv_python("keras-tensorflow"), "-m", "dlbench.harness", "--spec", spec_to_json(spec), "--out",
                    str(out)], cwd=smoke_data, capture_output=True, text=True, check=False)
    (record,) = load_records([out])
    assert record["status"] == "not_applicable" and "jit_compile" in record["error"], record["error"]
