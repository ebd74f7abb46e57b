"""ONNX as the workflow knows it (pure: no framework, no data): the IMDB study's plan, prototype in
PyTorch, export through ONNX, run elsewhere, checked. dlbench.workloads says what a definition
holds, dlbench.studies what a study is. Its models are those the training workloads declare
(EXPORTS): it names no workload.

A stage (rules.smk, scripts/export.py, in the PyTorch env) trains each PyTorch model of the
other workloads from the shared start for its convergence steps, on the run's order, as its
training runs do, and writes it twice: as an ONNX graph (torch.onnx.export) and as a PyTorch
program (torch.export), with the first `samples` inputs of its test split and PyTorch's outputs
on them. Each run then loads one model in one runtime, in the runtime's env (a run of no
framework: the compared thing is the runtime, RunSet.subject), times inference batches of the
test inputs like every run (calibrated units, warm-up apart, repeats), and checks its outputs
on the test inputs against PyTorch's: the run fails where they differ by more than `tolerance`
or its predicted classes agree on fewer than `min_agreement` of them.

A model is exported at onnx.opset, or at the least opset its PyTorch model exports at where that
is higher (its EXPORTS entry's min_opset, with the reason; e.g. PyTorch's exporter translates
F.scaled_dot_product_attention from opset 14 only): the others' graphs stay at the configured one.
"""
import itertools
from dataclasses import dataclass

from dlbench.declarations import declared, workload_definition
from dlbench.errors import ConfigError
from dlbench.spec_types import Run
from dlbench.sweep import RunSet, run_fields

DATA = "results/data/onnx"


@dataclass(frozen=True)
class SourceModel:
    workload: str        # the workload whose PyTorch model is exported
    run_set: str         # the run set of that workload whose model it is (its first, unless the entry names one)
    row: dict            # its grid row (besides framework, repeat and the workload's overhead_row)
    classes: str         # how its outputs predict: "argmax" (one class) or "sign" (a finding per logit)
    min_opset: tuple | None = None  # (opset, why): the least ONNX opset its PyTorch model exports at; None: any


def source_models(workloads=None):
    """{model name: SourceModel} of the models the workloads declare (EXPORTS: {name: (row,
    classes)}, or (row, classes, {"run_set": a run set of the workload, "min_opset": (opset, why)})
    for a model of another run set than the workload's first, or one whose layers need a later
    opset; every registered workload's where None), by the name a run and a table give them."""
    exports = declared("EXPORTS") if workloads is None else declared("EXPORTS", workloads)
    return {name: _source_model(workload, name, *entry) for workload, models in exports.items()
            for name, entry in models.items()}


def _source_model(workload, name, row, classes, options=None):
    """One EXPORTS entry: its run set named (the workload's first where the entry names none)."""
    options = dict(options or {})
    run_sets = [run_set.name for run_set in workload_definition(workload).RUN_SETS]
    run_set = options.pop("run_set", run_sets[0])
    if run_set not in run_sets:
        raise ValueError(f"{workload}'s EXPORTS: {name}'s run set {run_set!r} is not one of its run sets "
                         f"({', '.join(run_sets)})")
    return SourceModel(workload, run_set, dict(row), classes, **options)


# The models of the studies, by the name a run and a table give them.
MODELS = source_models()
# The runtimes and the env each runs in: PyTorch's own (the exported program; the reference),
# onnxruntime, and MXNet's ONNX importer (mxnet.contrib.onnx).
RUNTIMES = {"pytorch": "pytorch", "onnxruntime": "onnx", "mxnet": "mxnet"}


@dataclass(frozen=True)
class OnnxData:
    onnx: str            # the ONNX graph
    program: str         # the PyTorch program (torch.export)
    inputs: str          # the test inputs, .npy
    reference: str       # PyTorch's outputs on them, .npy


@dataclass(frozen=True)
class OnnxSpec(Run):
    model: str           # a name in MODELS
    classes: str         # MODELS[model].classes
    runtime: str         # a name in RUNTIMES
    tolerance: float     # the largest absolute difference from PyTorch's outputs that agrees
    min_agreement: float  # the smallest share of predicted classes that must agree
    data: OnnxData

    def point(self):
        return {"model": self.model, "runtime": self.runtime, "batch": self.batch}


COLUMNS = ("model", "runtime", "batch", "repeat")


def model_files(model):
    return OnnxData(onnx=f"{DATA}/{model}.onnx", program=f"{DATA}/{model}.pt2", inputs=f"{DATA}/{model}-inputs.npy",
                    reference=f"{DATA}/{model}-reference.npy")


def exported(config):
    """The models exported: onnx.models (every model of the configured workloads where none is
    named), less those this config does not train: whose workload is not configured, or whose run
    set plans no PyTorch run (IMDB's Transformer without `transformer` in imdb.models)."""
    ours = {name: model for name, model in source_models(config["workloads"]).items() if trained(model, config)}
    chosen = config["onnx"]["models"]
    return [model for model in (ours if chosen is None else chosen) if model in ours]


def trained(model, config):
    """Whether the config trains the model's run set in PyTorch, the framework it is exported from."""
    run_set = next(r for r in workload_definition(model.workload).RUN_SETS if r.name == model.run_set)
    return bool(run_set.rows(config, ["pytorch"], 1))


def runs(config, frameworks, repeats):
    """Rows {framework None, model, runtime, batch, repeat}: every exported model in every runtime."""
    onnx = config["onnx"]
    return [{"framework": None, "model": model, "runtime": runtime, "batch": batch, "repeat": repeat}
            for model, runtime, batch, repeat in itertools.product(
                exported(config), onnx["runtimes"], onnx["batches"], range(1, repeats + 1))]


def spec(config, row, threads):
    onnx = config["onnx"]
    return OnnxSpec(**run_fields(config, onnx, "onnx", row, COLUMNS, threads, batch=row["batch"]),
                    model=row["model"], classes=MODELS[row["model"]].classes, runtime=row["runtime"],
                    tolerance=onnx["tolerance"], min_agreement=onnx["min_agreement"],
                    data=model_files(row["model"]))


def runtime_env(spec):
    return RUNTIMES[spec.runtime]


def source_spec(config, model, threads):
    """The spec of the PyTorch training run whose model the export trains and writes: the source
    workload's overhead point (one device) in the model's run set, in PyTorch, repeat 1: a repeat
    that trains the convergence steps (measurement.convergence_repeats is at least 1)."""
    source = MODELS[model]
    source_definition = workload_definition(source.workload)
    row = {**source_definition.overhead_row(config), **source.row, "framework": "pytorch", "repeat": 1}
    run_set, = (run_set for run_set in source_definition.RUN_SETS if run_set.name == source.run_set)
    return run_set.build(config, row, threads)


def export_opset(config, model):
    """The ONNX opset `model` is exported at: onnx.opset, raised to the model's min_opset where
    that is higher (the others keep the configured one)."""
    minimum = MODELS[model].min_opset
    return max(config["onnx"]["opset"], minimum[0]) if minimum else config["onnx"]["opset"]


RUN_SETS = (RunSet("onnx", OnnxSpec, COLUMNS, runs, spec, subject="runtime", environment=runtime_env,
                   sample="inputs"),)
FIGURES = ("runtimes",)
TABLES = ("runtimes",)
TARGET = None
DATA_RULES = ("onnx_export",)      # its export trains and writes each model: data preparation
CLAIM_TABLES = ("onnx-runtimes",)


def check(config):
    """Known runtimes (all of them where none is named) and models (those the workloads declare);
    a model whose workload is not configured is left out (exported)."""
    onnx = config["onnx"]
    onnx.setdefault("runtimes", list(RUNTIMES))
    unknown = [runtime for runtime in onnx["runtimes"] if runtime not in RUNTIMES]
    if unknown:
        raise ConfigError(f"config onnx.runtimes: unknown runtime {unknown[0]!r} (known: {', '.join(RUNTIMES)})")
    unknown = [model for model in onnx["models"] or [] if model not in MODELS]
    if unknown:
        raise ConfigError(f"config onnx.models: unknown model {unknown[0]!r} (the workloads' EXPORTS: "
                          f"{', '.join(MODELS)})")
