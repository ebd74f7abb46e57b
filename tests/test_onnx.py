"""The ONNX study: a model whose weights changed fails the check against PyTorch's outputs; the
models are those the configured workloads declare (EXPORTS), and a new workload that declares a
model is exported without an edit to the study; a model of a workload's other run set (IMDB's
Transformer) is exported from its own spec, at the least opset its layers export at. Each model
exported and run in every runtime, its outputs checked, and an operator MXNet's importer cannot
translate named in the record: the session's smoke run (tests/test_workflow.py), and here the
Transformer's."""
import dataclasses
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from dlbench.config import load_config
from dlbench.definitions import run_set
from dlbench.specs import spec_to_json
from dlbench.studies.onnx.definition import MODELS, RUNTIMES, export_opset, exported, model_files, source_spec
from dlbench.studies.onnx.task import agreement
from conftest import REPO, copy_workflow, snakemake, venv_python
from specs import smoke_config, smoke_spec
from test_new_workload import add_toy_workload
from test_workflow import job_counts

EXPORT = REPO / "src" / "dlbench" / "studies" / "onnx" / "scripts" / "export.py"
SAMPLES = 16


def test_agreement_is_the_largest_difference_and_the_share_of_classes_that_agree():
    reference = np.array([[2.0, 1.0], [0.0, 1.0], [3.0, -1.0], [0.5, 0.4]])
    outputs = reference + np.array([[0, 0], [0, 0], [0, 0], [0, 0.2]])  # the last one's class flips
    assert agreement(outputs, reference, "argmax") == pytest.approx((0.2, 0.75))
    findings = np.array([[1.0, -1.0], [0.1, -0.1]])
    assert agreement(-findings, findings, "sign") == pytest.approx((2.0, 0.0))
    assert agreement(findings, findings, "sign") == (0.0, 1.0)


def export(model, workdir, out):
    """The export stage of `model` on the smoke preset's data, its files in `out`."""
    files = {name: str(out / path.split("/")[-1]) for name, path in dataclasses.asdict(model_files(model)).items()}
    config = smoke_config()
    proc = subprocess.run([venv_python("pytorch"), str(EXPORT), "--spec", spec_to_json(source_spec(config, model, 2)),
                           "--opset", str(export_opset(config, model)), "--samples", str(SAMPLES),
                           *[arg for name, path in files.items() for arg in (f"--{name}", path)]],
                          cwd=workdir, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return files


def run(model, runtime, files, workdir, tmp_path, **data):
    """A run of the exported model in a runtime, through the harness; its record."""
    spec = smoke_spec("onnx", None, model=model, runtime=runtime)
    spec = dataclasses.replace(spec, data=dataclasses.replace(spec.data, **{**files, **data}))
    out = tmp_path / f"{model}-{runtime}.json"
    proc = subprocess.run([venv_python(RUNTIMES[runtime]), "-m", "dlbench.harness", "--spec", spec_to_json(spec),
                           "--out", str(out)], cwd=workdir, capture_output=True, text=True)
    assert out.exists(), proc.stderr[-3000:]
    return json.loads(out.read_text())


# Each exported model in every runtime, its outputs within the tolerance of PyTorch's, and MXNet's importer
# refusing the LSTM's ConstantOfShape by name: the session's smoke run (tests/test_workflow.py,
# test_the_exported_models_run_in_every_runtime_and_agree_with_pytorch). Here, the check that fails.
@pytest.mark.slow
def test_a_perturbed_export_runs_and_fails_the_check_against_pytorch(smoke_data, tmp_path):
    files = export("mnist-small", smoke_data, tmp_path)
    assert np.load(files["inputs"]).shape == (SAMPLES, 1, 28, 28)
    # One weight of the first convolution moved: the graph runs, its outputs are not PyTorch's.
    perturbed = tmp_path / "perturbed.onnx"
    subprocess.run([venv_python("pytorch"), "-c", textwrap.dedent(f"""
        import onnx, numpy as np
        from onnx import numpy_helper
        model = onnx.load({files['onnx']!r})
        weight = model.graph.initializer[0]
        values = numpy_helper.to_array(weight).copy()
        values.flat[0] += 5.0
        weight.CopyFrom(numpy_helper.from_array(values, weight.name))
        onnx.save(model, {str(perturbed)!r})
        """)], check=True)
    record = run("mnist-small", "onnxruntime", files, smoke_data, tmp_path, onnx=str(perturbed))
    assert record["status"] == "failed"
    assert "differ from PyTorch's" in record["error"] and "mnist-small in onnxruntime" in record["error"]


def test_the_models_are_those_the_configured_workloads_declare(tmp_path):
    """onnx.models names models of the workloads' EXPORTS; left out, every configured workload's;
    a model whose workload, or run set, is not configured is left out, not an error."""
    assert {name: (m.workload, m.run_set, m.row, m.classes) for name, m in MODELS.items()} == {
        "mnist-small": ("mnist", "mnist", {"model": "small"}, "argmax"), "imdb-lstm": ("imdb", "imdb", {}, "argmax"),
        "imdb-transformer": ("imdb", "imdb-transformer", {}, "argmax"),
        "densenet": ("chestxray", "chestxray", {"input": "synthetic"}, "sign")}
    config = load_config(REPO / "config.yaml")
    assert exported(config) == config["onnx"]["models"] == ["mnist-small", "imdb-lstm", "imdb-transformer"]
    every = tmp_path / "every.yaml"
    every.write_text("workloads: [mnist, chestxray]\nonnx: {models: null}\n")
    config = load_config(REPO / "config.yaml", every)
    assert exported(config) == ["mnist-small", "densenet"]
    assert {row["model"] for row in run_set("onnx").rows(config, config["frameworks"], 1)} == {"mnist-small", "densenet"}
    lstm_only = tmp_path / "lstm.yaml"
    lstm_only.write_text("imdb: {models: [lstm]}\n")
    assert exported(load_config(REPO / "config.yaml", lstm_only)) == ["mnist-small", "imdb-lstm"]


def test_a_model_of_another_run_set_is_trained_from_its_spec_and_exported_at_its_least_opset(tmp_path):
    """IMDB's Transformer (run set imdb-transformer) from the Transformer's spec at the LSTM's
    overhead point; at opset 14 where onnx.opset is lower (PyTorch's exporter translates
    F.scaled_dot_product_attention from 14), the other models at onnx.opset."""
    config = smoke_config()
    transformer, lstm = (source_spec(config, model, 1) for model in ("imdb-transformer", "imdb-lstm"))
    assert (transformer.run_set, type(transformer.model).__name__, transformer.framework) == (
        "imdb-transformer", "TransformerModel", "pytorch")
    assert (lstm.run_set, type(lstm.model).__name__) == ("imdb", "LstmModel")
    assert transformer.batch == lstm.batch and transformer.repeat == lstm.repeat == 1
    assert MODELS["imdb-transformer"].min_opset[0] == 14 and MODELS["imdb-lstm"].min_opset is None
    assert config["onnx"]["opset"] == 11
    assert {model: export_opset(config, model) for model in MODELS} == {
        "mnist-small": 11, "imdb-lstm": 11, "imdb-transformer": 14, "densenet": 11}
    later = tmp_path / "later.yaml"
    later.write_text("onnx: {opset: 17}\n")
    config = load_config(REPO / "config.yaml", REPO / "presets" / "smoke.yaml", later)
    assert {export_opset(config, model) for model in MODELS} == {17}


@pytest.mark.slow
def test_the_transformer_agrees_in_onnxruntime_and_mxnet_names_what_it_cannot_import(smoke_data, tmp_path):
    """IMDB's Transformer exported at opset 14: its outputs in PyTorch's program and in onnxruntime
    within the tolerance of PyTorch's; MXNet's ONNX importer, which has no translation of some of
    its operators, recorded not applicable with the reason."""
    files = export("imdb-transformer", smoke_data, tmp_path)
    config = smoke_config()
    assert np.load(files["inputs"]).shape == (SAMPLES, config["imdb"]["maxlen"])
    opset = subprocess.run([venv_python("pytorch"), "-c", "import onnx, sys; print(next(o.version for o in "
                            "onnx.load(sys.argv[1]).opset_import if o.domain == ''))", files["onnx"]],
                           capture_output=True, text=True, check=True)
    assert opset.stdout.strip() == "14"
    for runtime in ("pytorch", "onnxruntime"):
        record = run("imdb-transformer", runtime, files, smoke_data, tmp_path)
        assert record["status"] == "ok", record.get("error")
        print(runtime, record["final"])
        assert record["final"]["max_abs_difference"] <= config["onnx"]["tolerance"]
        assert record["final"]["class_agreement"] == 1.0 and record["final"]["test_inputs"] == SAMPLES
    record = run("imdb-transformer", "mxnet", files, smoke_data, tmp_path)
    print("mxnet", record["status"], record["error"])
    assert record["status"] == "not_applicable"
    assert "ONNX importer (mxnet.contrib.onnx) has no translation" in record["error"]


# The toy workload (tests/toy_workload) with a PyTorch model to export: its EXPORTS, and the point the
# export trains it at (overhead_row, as every exported workload's)
TOY_EXPORT = """

EXPORTS = {"toy-linear": ({}, "argmax")}


def overhead_row(config):
    return {"batch": config["toy"]["batches"][0]}
"""
ROWS = """
from dlbench.config import load_config
from dlbench.definitions import run_set
config = load_config("config.yaml", "presets/smoke.yaml", "toy.yaml")
print(sorted({row["model"] for row in run_set("onnx").rows(config, config["frameworks"], 1)}))
"""


def test_a_workload_that_declares_an_export_model_is_exported_without_an_edit_to_the_study(tmp_path):
    workflow = copy_workflow(tmp_path / "toy")
    add_toy_workload(workflow)
    with open(workflow / "src/dlbench/workloads/toy/definition.py", "a") as definition:
        definition.write(TOY_EXPORT)
    (workflow / "toy.yaml").write_text("workloads: [mnist, toy]\nstudies: [onnx]\nonnx: {models: null}\n")
    rows = subprocess.run([sys.executable, "-c", ROWS], cwd=workflow, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(workflow / "src")})
    assert rows.returncode == 0, rows.stderr[-3000:]
    assert rows.stdout.split("\n")[-2] == "['mnist-small', 'toy-linear']"
    out = snakemake("-n", "--configfile", "presets/smoke.yaml", "toy.yaml", "--config", "frameworks=[pytorch,jax]",
                    cwd=workflow).stdout
    assert job_counts(out)["onnx_export"] == 2 and "results/data/onnx/toy-linear.onnx" in out
