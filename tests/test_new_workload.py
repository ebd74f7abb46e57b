"""The proof that a workload is one folder, one registry line and one schema section: a toy
workload (tests/toy_workload: logistic regression in PyTorch and JAX) is added to a copy of
the workflow by writing only those, and the workflow plans and runs it, and the studies it
declares something for (its DATA_RULES, its MEMORY_BATCHES) take it in without an edit: the
memory pass measures it, "where the time went" counts its runs and its data preparation."""
import filecmp
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from dlbench.tables import load_records
from conftest import REPO, copy_workflow, snakemake
from test_workflow import job_counts, planned_runs

TOY = Path(__file__).resolve().parent / "toy_workload"
REGISTRY = Path("src/dlbench/workloads/__init__.py")
SCHEMA = Path("schemas/config.schema.yaml")
# the toy and the studies it is in: the memory pass and the findings (where the time went)
RUN = ("--configfile", "presets/smoke.yaml", "--config", "workloads=[toy]", "studies=[memory,findings]",
       "frameworks=[pytorch,jax]")


def add_toy_workload(workflow):
    """Write the toy workload's folder, its registry line and its schema section; nothing else."""
    shutil.copytree(TOY, workflow / "src/dlbench/workloads/toy", ignore=shutil.ignore_patterns("schema.yaml", "README.md"))
    registry = (workflow / REGISTRY).read_text()
    line = re.search(r"^WORKLOADS = \(.*\)$", registry, flags=re.M)
    (workflow / REGISTRY).write_text(registry.replace(line[0], line[0].replace(")", ', "toy")')))
    with open(workflow / SCHEMA, "a") as schema:  # a section under the schema's properties, its last key
        schema.write((TOY / "schema.yaml").read_text())


def changed_files(workflow):
    """The files of the copy that differ from the repository's or are new, relative paths."""
    ours = {p.relative_to(workflow) for p in workflow.rglob("*") if p.is_file() and "results" not in p.parts
            and ".snakemake" not in p.parts and "__pycache__" not in p.parts}
    return sorted(str(p) for p in ours if not (REPO / p).is_file() or not filecmp.cmp(REPO / p, workflow / p, shallow=False))


@pytest.fixture(scope="module")
def toy_workflow(tmp_path_factory):
    workflow = copy_workflow(tmp_path_factory.mktemp("toy"))
    add_toy_workload(workflow)
    return workflow


def test_adding_a_workload_touches_its_folder_one_registry_line_and_one_schema_section(toy_workflow):
    changed = changed_files(toy_workflow)
    folder = [f for f in changed if f.startswith("src/dlbench/workloads/toy/")]
    assert sorted(set(changed) - set(folder)) == [str(SCHEMA), str(REGISTRY)]
    assert len(folder) == len([p for p in TOY.rglob("*") if p.is_file() and p.name not in ("schema.yaml", "README.md")])


def test_the_dry_run_plans_its_runs_tables_and_figures(toy_workflow):
    out = snakemake("-n", *RUN, cwd=toy_workflow).stdout
    counts = job_counts(out)
    # 2 frameworks x 1 batch x 1 repeat (smoke), and as many memory runs at its MEMORY_BATCHES (16)
    assert counts["train"] == 4 and counts["prepare_toy"] == 1
    # the tables of toy and toy-memory, and the (empty) tables of the memory run sets of the workloads not
    # configured: mnist's, chestxray's and imdb's two models'
    assert counts["aggregate"] == 2 + 4 and counts["plot_toy"] == 1 and counts["headline"] == 1
    assert counts["plot_memory"] == counts["findings_time"] == counts["findings"] == 1
    assert planned_runs(out) == sorted(f"results/runs/{name}/{fw}/batch~{batch}_repeat~1.json"
                                        for name, batch in (("toy", 32), ("toy-memory", 16)) for fw in ("jax", "pytorch"))
    assert "results/figures/toy/throughput.png" in out and "results/tables/toy-points.csv" in out
    # its data rule is where the time went's (its DATA_RULES), none written in the study
    assert "--data-rules prepare_toy=toy" in out


@pytest.mark.slow
def test_a_smoke_run_of_it_writes_valid_records_tables_and_its_figure(toy_workflow):
    snakemake("--cores", "2", *RUN, cwd=toy_workflow)
    paths = sorted((toy_workflow / "results/runs/toy").glob("*/*.json"))
    records = load_records(paths)  # each validated against schemas/run.schema.json
    assert sorted(record["framework"] for record in records) == ["jax", "pytorch"]
    for record in records:
        assert record["status"] == "ok", record.get("error")
        assert record["initial_weights"]["source"] == "shared"
        assert [s["metric"]["test_accuracy"] for s in record["segments"]][-1] > 0.5
    starts = {record["initial_weights"]["sha256"] for record in records}
    assert len(starts) == 1  # the same start in both frameworks
    assert (toy_workflow / "results/figures/toy/throughput.png").stat().st_size > 0
    assert (toy_workflow / "results/tables/toy-points.csv").read_text().count("\ntoy,") == 2
    # the memory pass measured it (its MEMORY_BATCHES) in both frameworks
    peaks = pd.read_csv(toy_workflow / "results/tables/memory-peaks.csv")
    toy = peaks[peaks["workload"] == "toy"]
    assert sorted(toy["framework"]) == ["jax", "pytorch"] and set(toy["batch"]) == {16}
    assert (toy["peak_rss_mib"] > 0).all()
    # where the time went: its runs by phase, its memory runs, its data preparation (its DATA_RULES) and tables
    time = pd.read_csv(toy_workflow / "results/tables/findings-time.csv")
    phases = time.groupby("run_set")["phase"].agg(set)
    assert {"steady units", "data preparation", "tables and figures"} <= phases["toy"]
    assert "steady units" in phases["toy-memory"]
    data = time[(time["run_set"] == "toy") & (time["phase"] == "data preparation")]
    assert data["jobs"].sum() == 1 and data["seconds"].sum() > 0
