"""The memory pass (the study memory): its runs are their workload's training runs at other
batches, its search finds the largest batch under a limit, the harness enforces the limit, and a
run of it writes valid records, tables and figures."""
import importlib.util
import json
import re
import subprocess
import textwrap

import pandas as pd
import pytest
import yaml

from dlbench.config import load_config
from dlbench.definitions import run_set, workload_module
from dlbench.errors import ConfigError
from dlbench.harness import OVER_LIMIT
from dlbench.record import read_record
from dlbench.specs import spec_to_json
from dlbench.spec_types import CompileCache
from dlbench.tables import load_records
from dlbench.weights import initial_weights, weights_sha256
from conftest import REPO, copy_workflow, report_python, snakemake, venv_python
from specs import smoke_config, smoke_spec

SEARCH = REPO / "src/dlbench/studies/memory/scripts/largest_batch.py"
MIB = 2 ** 20


def search_module():
    spec = importlib.util.spec_from_file_location("largest_batch", SEARCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("base_mib, per_sample_mib, limit_mib, max_batch", [
    (400, 30, 1000, 64),
    (400, 31, 1000, 64),
    (900, 200, 1000, 64),    # not even one sample fits
    (100, 1, 1000, 64),      # max_batch fits: capped
    (500, 7.3, 4000, 1024),
    (300, 2, 2000, 4096),    # 12% above the line at the answer: 8 batches tried
    (700, 90, 16000, 512),
])
@pytest.mark.parametrize("killed", [False, True])
def test_the_search_finds_the_largest_batch_under_the_limit(base_mib, per_sample_mib, limit_mib, max_batch, killed):
    """Against memory that grows by the batch (a little more than linearly), the search ends on the
    largest batch that fits, with the next one tried, in few trials; also where a batch over the
    limit is killed before its peak is known (as the harness does), halving the bracket."""
    next_batch = search_module().next_batch

    def peak(batch):
        return (base_mib + per_sample_mib * batch + 0.01 * batch ** 1.5) * MIB

    expected = max((b for b in range(1, max_batch + 1) if peak(b) <= limit_mib * MIB), default=0)
    trials = {}
    while (batch := next_batch(trials, limit_mib * MIB, max_batch)) is not None:
        assert batch not in trials and len(trials) < 12
        fits = peak(batch) <= limit_mib * MIB
        trials[batch] = (fits, peak(batch) if fits or not killed else None)
    assert max((b for b, (ok, _) in trials.items() if ok), default=0) == expected
    assert expected == max_batch or (expected + 1) in trials  # the bracket is closed by a batch tried
    assert len(trials) <= (11 if killed else 8)


def test_a_memory_run_is_its_workload_s_training_run_at_another_batch():
    config = load_config(REPO / "config.yaml")
    memory = run_set("mnist-memory")
    rows = memory.rows(config, ["pytorch", "tensorflow"], 1)
    # every mode of MNIST's config, at each batch, each repeat: TensorFlow's memory.repeats (the survey's memory
    # claims compare it: memory.repeated_frameworks), PyTorch's one
    assert config["memory"]["repeated_frameworks"] == ["mxnet", "tensorflow"]
    repeats = {"pytorch": 1, "tensorflow": config["memory"]["repeats"]}
    assert len(rows) == sum(len(config["mnist"]["modes"][fw]) * repeats[fw]
                            for fw in ("pytorch", "tensorflow")) * len(config["memory"]["batches"]["mnist"])
    specs = [memory.build(config, row, 2) for row in rows]
    assert len({(spec.framework, spec.run_id) for spec in specs}) == len(specs)
    spec = specs[0]
    trained = run_set("mnist").build(config, {**rows[0], "batch": 256, "repeat": 1}, 2)
    assert spec.run_set == "mnist-memory" and spec.batch == config["memory"]["batches"]["mnist"][0]
    assert workload_module(spec.run_set, "pytorch") == workload_module("mnist", "pytorch")
    assert weights_sha256(initial_weights(spec)) == weights_sha256(initial_weights(trained))  # the same start
    assert spec.convergence.steps == 0 and spec.measure.steady_units == 1
    assert (spec.model, spec.data, spec.optimizer) == (trained.model, trained.data, trained.optimizer)


def test_the_memory_pass_measures_each_model_a_workload_trains(tmp_path):
    """IMDB's Transformer beside its LSTM (imdb.models): a memory run set of its own, run as its training run
    set (its modules, spec type and initial weights), at IMDB's memory batches; none where it is not trained."""
    from dlbench.studies.memory.definition import memory_sets

    config = load_config(REPO / "config.yaml")
    assert config["imdb"]["models"] == ["lstm", "transformer"]
    assert memory_sets(config) == ["mnist-memory", "imdb-memory", "imdb-transformer-memory", "chestxray-memory"]
    memory = run_set("imdb-transformer-memory")
    rows = memory.rows(config, ["pytorch", "tensorflow"], 1)
    lstm_rows = run_set("imdb-memory").rows(config, ["pytorch", "tensorflow"], 1)
    # the LSTM's points less its sparse gradients (one per framework and mode), each at the same batches and repeats
    assert [(r["framework"], r["batch"], r["repeat"]) for r in rows] == [
        (r["framework"], r["batch"], r["repeat"]) for r in lstm_rows]
    spec = memory.build(config, rows[0], 2)
    trained = run_set("imdb-transformer").build(config, {**rows[0], "batch": 64, "repeat": 1}, 2)
    assert spec.run_set == "imdb-transformer-memory" and spec.batch == rows[0]["batch"]
    assert spec.run_id == f"workers~0_mode~eager_precision~float32_batch~{rows[0]['batch']}_repeat~1"
    assert workload_module(spec.run_set, "pytorch") == "dlbench.workloads.imdb.transformer.pytorch"
    assert type(spec) is type(trained) and (spec.model, spec.data, spec.optimizer) == (
        trained.model, trained.data, trained.optimizer)
    assert weights_sha256(initial_weights(spec)) == weights_sha256(initial_weights(trained))  # the same start
    assert spec.convergence.steps == 0 and spec.measure.steady_units == 1
    only_lstm = tmp_path / "lstm.yaml"
    only_lstm.write_text("imdb: {models: [lstm]}\n")
    config = load_config(REPO / "config.yaml", only_lstm)
    assert memory.rows(config, ["pytorch"], 1) == [] and run_set("imdb-memory").rows(config, ["pytorch"], 1)


def test_a_measured_workload_that_is_not_configured_is_named(tmp_path):
    extra = tmp_path / "memory.yaml"
    extra.write_text("workloads: [mnist]\nstudies: [memory]\nmemory: {workloads: [mnist, imdb]}\n")
    with pytest.raises(ConfigError, match="memory.workloads: imdb is not in workloads"):
        load_config(REPO / "config.yaml", extra)


def test_the_default_searches_no_largest_batch_the_modes_preset_every_framework_s(tmp_path):
    from dlbench.studies.memory.definition import searches

    config = load_config(REPO / "config.yaml")
    assert searches(config, config["frameworks"]) == []
    pytorch = tmp_path / "pytorch.yaml"
    pytorch.write_text("memory: {largest_batch: {frameworks: [pytorch]}}\n"
                       "chestxray: {modes: {pytorch: [eager, checkpoint]}}\n")
    config = load_config(REPO / "config.yaml", pytorch)
    assert searches(config, config["frameworks"]) == [("pytorch", "eager"), ("pytorch", "checkpoint")]
    paper = load_config(REPO / "config.yaml", REPO / "presets/study-modes.yaml")
    assert {f for f, _ in searches(paper, paper["frameworks"])} == set(paper["frameworks"])
    extra = tmp_path / "search.yaml"
    extra.write_text("frameworks: [pytorch, mxnet]\nmemory: {largest_batch: {frameworks: [tensorflow]}}\n")
    with pytest.raises(ConfigError, match="memory.largest_batch.frameworks: tensorflow is not in frameworks"):
        load_config(REPO / "config.yaml", extra)


@pytest.mark.slow
def test_the_harness_kills_a_run_over_its_memory_limit_and_says_so(smoke_data, tmp_path):
    spec = smoke_spec("mnist", "pytorch")
    out = tmp_path / "record.json"
    subprocess.run([venv_python("pytorch"), "-m", "dlbench.harness", "--spec", spec_to_json(spec), "--out", str(out),
                    "--memory-limit-mb", "64"], cwd=smoke_data, check=True)
    record = read_record(out)
    assert record["status"] == "failed" and OVER_LIMIT in record["error"] and "64 MiB" in record["error"]


@pytest.mark.slow
def test_a_transformer_memory_run_trains_in_its_own_module_and_reads_its_peak(smoke_data, tmp_path):
    """A memory run of IMDB's Transformer runs as imdb-transformer (its PyTorch module, its shared weights)."""
    row = {"framework": "pytorch", "workers": 0, "mode": "eager", "precision": "float32", "batch": 8, "repeat": 1}
    spec = run_set("imdb-transformer-memory").build(smoke_config(), row, 1)
    out = tmp_path / "record.json"
    subprocess.run([venv_python("pytorch"), "-m", "dlbench.harness", "--spec", spec_to_json(spec), "--out", str(out)],
                   cwd=smoke_data, check=True)
    record = read_record(out)
    assert record["status"] == "ok", record["error"]
    assert record["run_set"] == "imdb-transformer-memory" and record["parameters"] == 393_602
    assert record["memory"]["node_peak_rss_bytes"][0] > 100 * MIB


# A small DenseNet; PyTorch and TensorFlow with their memory-saving modes, MXNet beside TensorFlow: the pass end to end.
PASS_CONFIG = {
    "frameworks": ["pytorch", "tensorflow", "mxnet"],
    "workloads": ["mnist", "chestxray"],
    "studies": ["memory", "findings"],
    # TensorFlow compiled and eager, on 1 and 2 devices: every claim of the survey has its figures
    "mnist": {"devices": [1, 2], "nodes": [1], "strategies": {"pytorch": [], "tensorflow": ["mirrored"], "mxnet": []},
              "modes": {"pytorch": ["eager"], "tensorflow": ["graph", "eager"], "mxnet": ["hybrid"]}},
    "chestxray": {"blocks": [2, 2, 2, 2], "inputs": ["synthetic"],
                  "modes": {"pytorch": ["eager", "checkpoint"], "tensorflow": ["graph", "recompute"]},
                  # the image benchmarks read by no memory figure or claim: the fewest the config allows
                  "preprocess": {"libraries": ["pillow-simd"], "formats": ["jpeg"]}, "decode": {"workers": [0]},
                  "loader": {"workers": []}},
    # two batches of MNIST (a larger batch needs more); DenseNet's modes at one (what they save there)
    "memory": {"batches": {"mnist": [16, 64], "chestxray": [4]}, "repeats": 1,
               # PyTorch's two modes searched: 31 trials of 5 searches took 7.5 of the pass's 15 min in CI; every
               # framework's search is the same script. Under 600 MiB the answer is a batch of about 5 (a
               # process of about 380 MiB at batch 1, 40 more a sample): under 1,000 it was 16 and 17, whose
               # trials took twice the CPU time of those at batch 1 and 2
               "largest_batch": {"frameworks": ["pytorch"], "blocks": [2, 2, 2, 2], "limit_mb": 600, "max_batch": 12,
                                 "max_trials": 10}},
}


@pytest.fixture(scope="module")
def memory_pass(tmp_path_factory):
    # A fresh copy. In a copy of the session's smoke run every job ran again all the same (tried):
    # the jobs' code inputs are absolute paths, another folder's are "a changed set of input files"
    # for the first jobs (fetch_wheel), and every job downstream follows.
    workflow = copy_workflow(tmp_path_factory.mktemp("memory"))
    (workflow / "pass.yaml").write_text(yaml.safe_dump(PASS_CONFIG))
    # the targets before --configfile, which takes every word after it
    snakemake("results/tables/memory-peaks.csv", "results/tables/findings-replication.csv", "--cores", "2",
              "--configfile", "presets/smoke.yaml", "pass.yaml", cwd=workflow)
    return workflow


@pytest.mark.slow
def test_the_memory_pass_writes_valid_records_and_its_tables(memory_pass):
    records = load_records(sorted((memory_pass / "results/runs").glob("*-memory/*/*.json")))  # schema-checked
    assert len(records) == 4 * 2 + 5 * 1  # MNIST: 4 framework-modes x 2 batches; DenseNet: 5 modes x 1 batch
    assert all(r["status"] == "ok" for r in records), [r["error"] for r in records if r["status"] != "ok"]
    peaks = pd.read_csv(memory_pass / "results/tables/memory-peaks.csv")
    assert len(peaks) == len(records) and peaks["peak_rss_mib"].gt(0).all()
    points = peaks[peaks["workload"] == "mnist"].groupby(["framework", "mode"])
    assert len(points) == 4  # MNIST's framework-modes: PyTorch eager, TensorFlow graph and eager, MXNet hybrid
    for _, point in points:  # a larger batch needs more
        assert len(point) == 2 and point.sort_values("batch")["peak_rss_mib"].is_monotonic_increasing
    saving = pd.read_csv(memory_pass / "results/tables/memory-saving.csv")
    assert sorted(saving["mode"].unique()) == ["checkpoint", "recompute"]
    assert saving["samples_per_s"].gt(0).all()  # from the timed runs of the same modes


@pytest.mark.slow
def test_the_search_s_answer_is_a_batch_that_fit_next_to_one_that_did_not(memory_pass):
    limit = PASS_CONFIG["memory"]["largest_batch"]["limit_mb"] * MIB
    table = pd.read_csv(memory_pass / "results/tables/memory-largest-batch.csv")
    assert len(table) == 2 and set(table["model"]) == {"DenseNet-21"}  # PyTorch eager and checkpoint
    summaries = sorted((memory_pass / "results/memory/largest-batch").glob("*/*.json"))
    # a summary per search (rules.smk's SEARCH_SUMMARY): PyTorch eager and checkpoint
    assert [path.relative_to(memory_pass / "results/memory/largest-batch").as_posix() for path in summaries] == [
        "pytorch/mode~checkpoint.json", "pytorch/mode~eager.json"]
    for path in summaries:
        summary = json.loads(path.read_text())
        trials = {t["batch"]: t for t in summary["trials"]}
        largest = summary["largest_batch"]
        assert summary["complete"] and trials, path
        assert all(t["peak_rss_bytes"] <= limit for t in trials.values() if t["fits"])
        assert all(not t["fits"] for b, t in trials.items() if b > largest)
        if not summary["capped"]:
            assert not trials[largest + 1]["fits"]
        for trial in trials.values():  # each batch tried is a record of its own
            assert read_record(memory_pass / trial["record"])["spec"]["batch"] == trial["batch"]
    assert (memory_pass / "results/figures/memory/largest-batch.png").stat().st_size > 0


@pytest.mark.slow
def test_the_survey_s_claims_get_verdicts_from_the_run_s_tables(memory_pass):
    claims = pd.read_csv(memory_pass / "results/tables/findings-replication.csv").set_index("claim")
    survey = claims[claims["study"] == "TensorFlow vs MXNet survey"]
    assert len(survey) == 4
    for claim, row in survey.iterrows():
        assert row["verdict"] != "not measured here", (claim, row["figures"])
        assert re.search(r"\d", row["figures"]) and row["source"].endswith(".csv")
    # what the verdicts cite is in the tables they name
    assert "tensorflow graph / eager (mnist" in claims.loc["Graphs (compiled modes) train faster than imperative code",
                                                           "figures"]
    assert "2 / 1 devices (mirrored)" in claims.loc["TensorFlow gains by treating each CPU core as a device", "figures"]


# Runs in the report env: the memory study's peaks and ratios tables from a runs table (JSON rows).
PEAKS_AND_RATIOS = textwrap.dedent("""
    import json, sys
    import pandas as pd
    from dlbench.studies.memory.scripts import plot
    runs = pd.DataFrame(json.loads(sys.argv[1]))
    print(json.dumps({"peaks": json.loads(plot.peaks(runs).to_json(orient="records")),
                      "ratios": json.loads(plot.ratios(runs).to_json(orient="records"))}))
""")


def memory_runs(peaks_mib):
    """A memory runs table: {(framework, mode): [each process's peak RSS, MiB]} at MNIST batch 64."""
    return [{"run_set": "mnist-memory", "framework": framework, "mode": mode, "status": "ok", "parameters": 1,
             "run_id": f"mode~{mode}_batch~64_repeat~{repeat}", "peak_rss_bytes": mib * MIB, "peak_pss_bytes": mib * MIB}
            for (framework, mode), values in peaks_mib.items() for repeat, mib in enumerate(values, 1)]


def test_peaks_and_their_ratios_have_intervals_over_the_processes():
    """Each process's peak is a sample: a point's mean with its interval, every pair of frameworks in
    their default modes and each mode over its framework's default, with intervals over both sides'
    processes; one process a side has none."""
    runs = memory_runs({("mxnet", "hybrid"): [396, 401, 392], ("tensorflow", "graph"): [737, 731, 744],
                        ("tensorflow", "eager"): [767, 760, 771], ("mxnet", "imperative"): [525, 531, 520],
                        ("pytorch", "eager"): [480]})
    out = report_python("-c", PEAKS_AND_RATIOS, json.dumps(runs), capture_output=True, text=True, check=True).stdout
    tables = json.loads(out)
    peaks = {(p["framework"], p["mode"]): p for p in tables["peaks"]}
    mxnet = peaks[("mxnet", "hybrid")]
    assert mxnet["repeats"] == 3 and mxnet["peak_rss_mean_mib"] == pytest.approx(396.33, abs=0.01)
    assert 380 < mxnet["peak_rss_ci_low_mib"] < 396.33 < mxnet["peak_rss_ci_high_mib"] < 410
    assert peaks[("pytorch", "eager")]["peak_rss_ci_low_mib"] is None  # one process: no interval
    ratios = {(r["compared"], r["numerator"], r["denominator"]): r for r in tables["ratios"]}
    # frameworks in their default modes, the later of dlbench.frameworks' order over the earlier; modes over the default
    assert set(ratios) == {("framework", "tensorflow", "pytorch"), ("framework", "mxnet", "pytorch"),
                           ("framework", "mxnet", "tensorflow"), ("mode", "eager", "graph"),
                           ("mode", "imperative", "hybrid")}
    less = ratios[("framework", "mxnet", "tensorflow")]
    assert less["ratio"] == pytest.approx(396.33 / 737.33, rel=1e-3) and less["ci_high"] < 1
    assert less["verdict"] == "less memory" and less["repeats_numerator"] == less["repeats_denominator"] == 3
    assert ratios[("mode", "eager", "graph")]["framework"] == "tensorflow"
    assert ratios[("mode", "eager", "graph")]["verdict"] == "more memory"
    assert ratios[("framework", "mxnet", "pytorch")]["ci_low"] is None
    assert ratios[("framework", "mxnet", "pytorch")]["verdict"] == "one repeat: no interval"


def test_a_second_model_s_peaks_are_a_panel_and_ratios_of_their_own():
    """The Transformer's memory runs (imdb-transformer-memory) are a model of their own in the tables
    (`workload` imdb-transformer): their frameworks compared with each other, never with the LSTM's."""
    peaks = {"imdb-memory": {("mxnet", "hybrid"): [300, 302, 298], ("tensorflow", "graph"): [600, 604, 596]},
             "imdb-transformer-memory": {("mxnet", "hybrid"): [320, 322, 318], ("tensorflow", "graph"): [610, 615, 605]}}
    runs = [{**row, "run_set": name, "run_id": row["run_id"].replace("batch~64", "batch~16")}
            for name, points in peaks.items() for row in memory_runs(points)]
    out = report_python("-c", PEAKS_AND_RATIOS, json.dumps(runs), capture_output=True, text=True, check=True).stdout
    tables = json.loads(out)
    assert sorted((p["workload"], p["framework"], p["batch"]) for p in tables["peaks"]) == [
        ("imdb", "mxnet", 16), ("imdb", "tensorflow", 16), ("imdb-transformer", "mxnet", 16),
        ("imdb-transformer", "tensorflow", 16)]
    ratios = {r["workload"]: r for r in tables["ratios"]}
    assert len(tables["ratios"]) == 2 and set(ratios) == {"imdb", "imdb-transformer"}
    transformer = ratios["imdb-transformer"]
    assert (transformer["numerator"], transformer["denominator"]) == ("mxnet", "tensorflow")
    assert transformer["ratio"] == pytest.approx(320 / 610, rel=1e-3) and transformer["verdict"] == "less memory"


def test_a_memory_run_compiles_cold_in_a_cache_of_its_own():
    """Every memory process the same measurement, and none empties the timed point's compile cache."""
    config = load_config(REPO / "config.yaml")
    memory = run_set("mnist-memory")
    rows = [row for row in memory.rows(config, ["mxnet", "jax"], 1) if row["mode"] != "imperative"]
    # memory.repeats for the frameworks the claims compare (memory.repeated_frameworks), one process for the others
    assert [(row["framework"], row["repeat"]) for row in rows] == [("mxnet", 1), ("mxnet", 2), ("mxnet", 3), ("jax", 1)]
    caches = {memory.build(config, row, 2).compile_cache for row in rows}
    assert caches == {CompileCache(directory=None, fill=True)}
    config["memory"]["repeated_frameworks"] = None   # every framework's points
    assert len(memory.rows(config, ["jax"], 1)) == config["memory"]["repeats"]
