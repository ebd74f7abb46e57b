"""Typed specs, code provenance and the one list of frameworks."""
import dataclasses
import json
import re

import pytest
import yaml

from dlbench.frameworks import FRAMEWORKS
from dlbench.clock import epoch_order
from dlbench.config import load_config
from dlbench.errors import FrameworkError, NotApplicable
from dlbench.protocol import resolve_device
from dlbench.provenance import code_files
from dlbench.definitions import run_set
from dlbench.spec_types import CompileCache, Convergence
from dlbench.specs import SpecError, spec_from_dict, spec_to_dict, spec_to_json
from dlbench.studies.onnx.definition import source_spec
from conftest import REPO
from specs import DEFAULT_ROWS, smoke_config, smoke_spec

WORKLOADS = ("mnist", "imdb", "chestxray", "chestxray-loader")


@pytest.mark.parametrize("workload, framework", [*((w, "tensorflow") for w in WORKLOADS),
                                                 ("chestxray-preprocess", None), ("chestxray-decode", None),
                                                 ("onnx", None)])
def test_a_spec_survives_json_and_its_point_is_its_run_id(workload, framework):
    spec = smoke_spec(workload, framework)
    again = spec_from_dict(json.loads(spec_to_json(spec)))
    assert again == spec
    assert spec.run_id == "_".join(f"{k}~{v}" for k, v in spec.point().items()) + f"_repeat~{spec.repeat}"


def test_one_name_per_meaning_in_every_workload():
    for workload in ("mnist", "imdb", "chestxray"):
        spec = spec_to_dict(smoke_spec(workload, "pytorch"))
        assert isinstance(spec["model"], dict) and isinstance(spec["data"], dict), workload
        assert {"batch", "devices", "nodes", "strategy", "threads", "measure", "convergence", "seed"} <= set(spec), workload


@pytest.mark.parametrize("workload", ["mnist", "imdb", "chestxray"])
def test_only_the_first_repeats_train_the_convergence_segments(workload):
    """measurement.convergence_repeats, 1 by default: repeat 2 measures throughput only, from the
    same start; the rest of its spec is its point's."""
    first, second = (smoke_spec(workload, "pytorch", repeat=repeat) for repeat in (1, 2))
    assert first.convergence.steps > 0
    assert second.convergence == Convergence(steps=0, eval_every=first.convergence.eval_every)
    assert dataclasses.replace(second, repeat=1, run_id=first.run_id, convergence=first.convergence,
                               compile_cache=first.compile_cache) == first
    config = smoke_config()
    config["measurement"]["convergence_repeats"] = 2
    row = {**DEFAULT_ROWS[workload], "framework": "pytorch"}
    assert run_set(workload).build(config, {**row, "repeat": 2}, 2).convergence == first.convergence
    assert run_set(workload).build(config, {**row, "repeat": 3}, 2).convergence.steps == 0
    # a workload's own convergence_repeats in its place (config.yaml's mnist: 3, the first / second epoch)
    config[workload]["convergence_repeats"] = 3
    assert run_set(workload).build(config, {**row, "repeat": 3}, 2).convergence == first.convergence
    assert run_set(workload).build(config, {**row, "repeat": 3}, 2).compile_cache.fill
    assert run_set(workload).build(config, {**row, "repeat": 4}, 2).convergence.steps == 0


def test_the_default_trains_mnist_s_two_epochs_in_every_first_round_repeat():
    """config.yaml: MNIST's first and second epoch in 3 processes (the replication table's interval), each
    cold; the other workloads' convergence in repeat 1 alone."""
    config = load_config(REPO / "config.yaml")
    assert config["mnist"]["convergence_repeats"] == config["measurement"]["repeats"] == 3
    for workload, trained in (("mnist", 3), ("imdb", 1), ("chestxray", 1)):
        row = {**DEFAULT_ROWS[workload], "framework": "jax"}
        specs = [run_set(workload).build(config, {**row, "repeat": repeat}, 2) for repeat in (1, 2, 3, 4)]
        assert [spec.compile_cache.fill for spec in specs] == [True] * trained + [False] * (4 - trained), workload
        if workload != "chestxray":  # DenseNet trains no convergence steps in the default
            assert [spec.convergence.steps > 0 for spec in specs] == [True] * trained + [False] * (4 - trained)


@pytest.mark.parametrize("workload", ["mnist", "imdb", "chestxray"])
def test_the_repeats_that_train_the_convergence_segments_compile_cold_and_the_others_load_their_programs(workload):
    """measurement.compile_cache: one folder per point, emptied and filled by the repeats that
    train the convergence segments (their first segment and compile time are the point's), read by
    the later ones; another point has another folder; off, every repeat has an empty one of its own."""
    config = smoke_config()
    config["measurement"]["convergence_repeats"] = 2
    row = {**DEFAULT_ROWS[workload], "framework": "jax"}
    caches = [run_set(workload).build(config, {**row, "repeat": repeat}, 2).compile_cache for repeat in (1, 2, 3, 4)]
    assert [cache.fill for cache in caches] == [True, True, False, False]
    folder = caches[0].directory
    assert {cache.directory for cache in caches} == {folder} and folder.startswith(f"results/cache/compile/{workload}/jax/")
    assert "repeat" not in folder
    assert run_set(workload).build(config, {**row, "framework": "pytorch", "repeat": 3}, 2).compile_cache.directory != folder
    config["measurement"]["compile_cache"] = False
    assert {run_set(workload).build(config, {**row, "repeat": repeat}, 2).compile_cache
            for repeat in (1, 3)} == {CompileCache(directory=None, fill=True)}


def test_the_onnx_export_trains_its_source_s_convergence_steps():
    """The export trains repeat 1's spec, which keeps its convergence steps."""
    config = smoke_config()
    assert config["onnx"]["models"], "the smoke preset exports no model"
    for model in config["onnx"]["models"]:
        assert source_spec(config, model, 2).convergence.steps > 0, model


@pytest.mark.parametrize("change, message", [
    (lambda s: s.pop("measure"), "spec: missing key(s) measure"),
    (lambda s: s.update(epoch=3), "spec: unknown key(s) epoch"),
    (lambda s: s["model"].update(name=3), "spec.model.name: expected str"),
    (lambda s: s["optimizer"].pop("lr"), "spec.optimizer: missing key(s) lr"),
    (lambda s: s.update(batch="64"), "spec.batch: expected int"),
    (lambda s: s.update(run_set="cifar"), "run_set must be one of"),
])
def test_a_wrong_key_fails_where_the_spec_is_read_naming_it(change, message):
    spec = spec_to_dict(smoke_spec("mnist", "pytorch"))
    change(spec)
    with pytest.raises(SpecError, match=re.escape(message)):
        spec_from_dict(spec)


def test_every_framework_reads_the_same_order_and_each_device_its_slice():
    order = epoch_order(100, 8, seed=1, epoch=2)
    assert order.shape == (12, 8) and len(set(order.ravel())) == 96
    assert (order == epoch_order(100, 8, seed=1, epoch=2)).all()
    assert not (order == epoch_order(100, 8, seed=1, epoch=3)).all()


def test_devices_are_resolved_the_same_way_for_every_framework():
    assert resolve_device("x", "auto", visible_gpus=0, machine_gpus=0, devices=2) == "cpu"
    assert resolve_device("x", "auto", visible_gpus=4, machine_gpus=4, devices=2) == "gpu"
    assert resolve_device("x", "cpu", visible_gpus=4, machine_gpus=4, devices=2) == "cpu"
    with pytest.raises(FrameworkError, match="mxnet sees 0 GPU"):
        resolve_device("mxnet", "auto", visible_gpus=0, machine_gpus=1, devices=1)
    with pytest.raises(NotApplicable):
        resolve_device("x", "gpu", visible_gpus=1, machine_gpus=1, devices=2)


def test_a_run_s_code_is_what_it_imports():
    src = REPO / "src"
    files = {str(p).split("src/", 1)[1] for p in code_files(src, modules=["dlbench.harness", "dlbench.protocol",
                                                                          "dlbench.frameworks.pytorch",
                                                                          "dlbench.workloads.mnist.pytorch"])}
    assert {"dlbench/protocol.py", "dlbench/harness.py", "dlbench/frameworks/pytorch/__init__.py",
            "dlbench/workloads/mnist/task.py", "dlbench/workloads/mnist/pytorch.py",
            "dlbench/specs.py", "dlbench/record.py"} <= files
    assert not any("tensorflow" in f or "imdb" in f for f in files)
    script = {str(p).rsplit("/", 2)[-1] for p in code_files(src, scripts=[REPO / "src" / "dlbench" / "workloads" / "mnist" / "scripts" / "prepare.py"])}
    assert {"prepare.py", "data.py", "errors.py"} <= script


def test_a_snakemake_invocation_parses_each_file_of_code_once(monkeypatch):
    """Every job asks for its code; the jobs share most files, and a file is parsed once per process."""
    import ast

    from dlbench import provenance

    parsed = []

    class CountingAst:  # provenance's ast, counting what it parses
        def __getattr__(self, name):
            return getattr(ast, name)

        def parse(self, source, filename):
            parsed.append(filename)
            return ast.parse(source, filename)

    monkeypatch.setattr(provenance, "ast", CountingAst())
    provenance._imports.cache_clear()
    provenance._code_files.cache_clear()
    src = REPO / "src"
    jobs = [["dlbench.harness", "dlbench.protocol", f"dlbench.frameworks.{name}", f"dlbench.workloads.mnist.{name}"]
            for name in ("pytorch", "mxnet")]
    first = [code_files(src, modules=modules) for modules in jobs]
    assert len(parsed) == len(set(parsed)) == len(set().union(*first)) > 0
    again = [code_files(src, modules=modules) for modules in jobs]
    assert again == first and len(parsed) == len(set(parsed))
def test_the_frameworks_are_listed_in_one_place():
    """Adding a framework: its line in dlbench/frameworks/__init__.py, its adapter, its env
    file and one module per workload; no rule, schema or config lists the frameworks."""
    for name, framework in FRAMEWORKS.items():
        assert (REPO / "envs" / f"{name}.yaml").is_file(), name
        assert (REPO / "src" / "dlbench" / "frameworks" / framework.module / "__init__.py").is_file(), name
        for workload in WORKLOADS:
            module = REPO / "src" / "dlbench" / "workloads" / workload.replace("-", "/") / f"{framework.module}.py"
            assert module.is_file(), module
    listed = re.compile(r"\b(" + "|".join(FRAMEWORKS) + r")\b")
    for path in [REPO / "Snakefile", *(REPO / "rules").glob("*.smk"), REPO / "schemas" / "config.schema.yaml",
                 REPO / "src" / "dlbench" / "sweep.py", REPO / "src" / "dlbench" / "config.py"]:
        assert not listed.search(path.read_text()), f"{path} names a framework"


def names_of(paths, names):
    """(path, the first of `names` its code names: not its comments nor docstrings) of the paths that name one."""
    named = re.compile(r"(?<![\w/.-])(" + "|".join(names) + r")(?![\w-])")
    for path in paths:
        code = "\n".join(line.split("#")[0] for line in strip_docstrings(path.read_text()).splitlines())
        found = named.search(code.replace("dlbench.workloads", "").replace("dlbench.studies", ""))
        if found:
            yield path.relative_to(REPO), found[0]


def test_the_workloads_and_studies_are_listed_in_one_place():
    """Adding a workload: its line in dlbench/workloads/__init__.py, its folder and its schema
    section; a study likewise (dlbench/studies/__init__.py); no rule, script, schema check or shared
    module names a workload or study (the code, not its comments) but its own folder."""
    from dlbench.definitions import definition, run_sets
    from dlbench.studies import STUDIES
    from dlbench.workloads import WORKLOADS as KNOWN

    shared = [REPO / "Snakefile", *(REPO / "rules").glob("*.smk"), *(REPO / "scripts").glob("*.py"),
              *(p for p in (REPO / "src" / "dlbench").rglob("*.py") if not {"workloads", "studies"} & set(p.parts))]
    assert list(names_of(shared, run_sets())) == []
    schema = yaml.safe_load((REPO / "schemas" / "config.schema.yaml").read_text())
    assert "enum" not in schema["properties"]["workloads"]["items"]  # checked against the registry
    assert "enum" not in schema["properties"]["studies"]["items"]
    for name, package in [*((w, "workloads") for w in KNOWN), *((s, "studies") for s in STUDIES)]:
        folder = REPO / "src" / "dlbench" / package / name
        # a task of its own, unless its runs run as a workload's (the memory pass) or it has none (findings)
        own_task = not all(run_set.runs_as for run_set in definition(name).RUN_SETS)
        assert {"definition.py", "rules.smk", *(["task.py"] if own_task else [])} <= {p.name for p in folder.iterdir()}
        assert name in schema["properties"], name


def test_a_study_names_no_workload_it_reads_their_declarations():
    """A study's definition and rules name no training workload (nor its run sets): what they need
    of each comes from its declarations (dlbench.workloads), so that a new workload is in every study
    it declares something for. The findings' claims are the exception: each claim is a study's claim
    about one workload (scripts/replication.py, and the claims' flag of ChestX-ray's images)."""
    from dlbench.definitions import run_sets
    from dlbench.workloads import WORKLOADS as KNOWN

    studies = REPO / "src" / "dlbench" / "studies"
    claims = [studies / "findings" / "scripts" / "replication.py", studies / "findings" / "rules.smk"]
    paths = [p for p in [*studies.rglob("*.py"), *studies.rglob("*.smk")] if p not in claims]
    assert list(names_of(paths, run_sets(KNOWN))) == []


def strip_docstrings(source):
    """Python source without its docstrings (a Snakefile's too: its Python parts)."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:  # a Snakefile: leave it as it is
        return source
    lines = source.splitlines()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            for i in range(body[0].lineno - 1, body[0].end_lineno):
                lines[i] = ""
    return "\n".join(lines)


def test_the_tests_runs_take_one_thread_unless_they_ask_for_more():
    """tests/specs.py: side by side on two cores, a run of two threads spins (docs/tests.md)."""
    assert {smoke_spec(name, "pytorch").threads for name in ("mnist", "imdb", "chestxray")} == {1}
    assert smoke_spec("mnist", "pytorch", threads=2).threads == 2
