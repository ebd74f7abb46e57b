"""A/B in one run (config variants): a variant runs every point of its framework beside it, with
the same spec but for what it changes; each point gets a verdict of variant / framework; the
adaptive rounds spend their budget on the open ones; the allocator policy reaches the training
process. docs/ab.md says what these tests hold it to."""
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import REPO, copy_workflow, snakemake
from dlbench.allocator import FIXED_TUNABLES, TUNABLES, process_environment
from dlbench.config import load_config
from dlbench.errors import ConfigError
from dlbench.rounds import ANOTHER_ROUND, plan
from dlbench.stats import ab_verdicts
from dlbench.sweep import run_id, with_variants
from dlbench.workloads.mnist.definition import COLUMNS, spec as mnist_spec
from test_stats import point_rows, table

RESAMPLES = 500
VARIANTS = {"b": {"framework": "pytorch", "env": None, "denormals": None, "allocator": "framework-default",
                  "threads": 1, "environment": {"ONEDNN_MAX_CPU_ISA": "AVX2"}}}


def test_a_variant_runs_every_point_of_its_framework_after_it_named_in_its_run_id():
    rows = [{"framework": f, "batch": b, "repeat": 1} for f in ("pytorch", "jax") for b in (32, 64)]
    found = with_variants(rows, VARIANTS)
    assert [(r["framework"], r["batch"], r.get("variant")) for r in found] == [
        ("pytorch", 32, None), ("pytorch", 64, None), ("pytorch", 32, "b"), ("pytorch", 64, "b"),
        ("jax", 32, None), ("jax", 64, None)]
    assert run_id(found[2], ("batch", "repeat")) == "batch~32_variant~b_repeat~1"
    assert run_id(found[0], ("batch", "repeat")) == "batch~32_repeat~1"


def test_a_variant_s_spec_is_its_framework_s_but_for_what_it_changes(tmp_path):
    config = load_config(REPO / "config.yaml")
    config["variants"] = VARIANTS
    row = {"framework": "pytorch", "model": "small", "duplicate": 1, "batch": 256, "devices": 1, "nodes": 1,
           "strategy": "none", "mode": "eager", "repeat": 2}
    base, variant = mnist_spec(config, row, 2), mnist_spec(config, {**row, "variant": "b"}, 2)
    assert (base.variant, base.allocator, base.threads, base.environment) == (None, "fixed", 2, ())
    assert (variant.variant, variant.allocator, variant.threads, variant.environment) == (
        "b", "framework-default", 1, ("ONEDNN_MAX_CPU_ISA=AVX2",))
    assert variant.framework == "pytorch" and variant.seed == base.seed and variant.data == base.data
    assert variant.sweep_point() == {**base.sweep_point(), "variant": "b"} and "variant" not in base.sweep_point()
    assert variant.run_id == base.run_id.replace("_repeat~2", "_variant~b_repeat~2")


def test_the_training_process_gets_the_allocator_policy_and_the_variant_s_variables():
    fixed = process_environment({"allocator": "fixed", "environment": ["A=1"]}, environ={})
    assert fixed == {"A": "1", TUNABLES: FIXED_TUNABLES}
    kept = process_environment({"allocator": "fixed", "environment": []}, environ={TUNABLES: "glibc.x=1"})
    assert kept == {TUNABLES: f"glibc.x=1:{FIXED_TUNABLES}"}
    assert process_environment({"allocator": "framework-default", "environment": []}, environ={TUNABLES: "x"}) == {}


@pytest.mark.parametrize("variant, error", [
    ({"pytorch": {"framework": "pytorch"}}, "variants.pytorch: a framework's name"),
    ({"b": {"framework": "jax"}}, "variants.b.framework: 'jax' is not one of the configured frameworks"),
])
def test_a_variant_of_a_framework_not_configured_or_named_like_one_is_refused(tmp_path, variant, error):
    path = tmp_path / "ab.yaml"
    path.write_text(yaml.safe_dump({"frameworks": ["pytorch"], "variants": variant}))
    with pytest.raises(ConfigError, match=error):
        load_config(REPO / "config.yaml", path)


def test_a_variant_s_missing_env_file_stops_the_workflow_naming_it(tmp_path):
    path = tmp_path / "ab.yaml"
    path.write_text(yaml.safe_dump({"frameworks": ["pytorch"], "variants": {"b": {"framework": "pytorch",
                                                                                  "env": "pytorch-next"}}}))
    proc = snakemake("-n", "--configfile", str(path), check=False)
    assert proc.returncode != 0
    said = proc.stdout + proc.stderr
    assert "variants.b.env: no env file" in said and "pytorch-next.yaml" in said


def ab_units(factor, between=0.01, seed=0, repeats=3):
    """Units of one MNIST point of pytorch and of its variant b, b's throughput `factor` times."""
    rng = np.random.default_rng(seed)

    def values(scale):
        return (100 * scale * rng.lognormal(0, between, (repeats, 1)) * rng.lognormal(0, 0.005, (repeats, 3))).tolist()

    # the framework's rows have no variant (NaN), as a units table holds them
    return table(point_rows("pytorch", values(1.0), variant=np.nan), point_rows("pytorch", values(factor), variant="b"))


def test_the_a_b_verdict_is_same_slower_faster_or_not_resolved():
    verdicts = {factor: ab_verdicts(ab_units(factor), resamples=RESAMPLES).iloc[0] for factor in (1.0, 0.85, 1.2)}
    assert [verdicts[f]["verdict"] for f in (1.0, 0.85, 1.2)] == ["same", "slower", "faster"]
    assert verdicts[0.85]["ratio"] == pytest.approx(0.85, rel=0.03)
    assert verdicts[0.85]["framework"] == "pytorch" and verdicts[0.85]["variant"] == "b"
    noisy = ab_verdicts(ab_units(0.97, between=0.06, seed=3), resamples=RESAMPLES).iloc[0]
    assert noisy["verdict"] == "not resolved at 3 repeats" and noisy["repeats_needed"] > 3


def test_the_variant_meets_its_own_framework_only_in_the_ratios():
    from dlbench.stats import ratios

    units = ab_units(0.9)
    units = pd.concat([units, table(point_rows("jax", [[50.0, 50.5, 49.5]] * 3))], ignore_index=True)
    found = ratios(units, resamples=RESAMPLES)
    assert set(found["comparison"]) == {"pytorch / jax", "b / pytorch"}


def test_an_open_a_b_point_gets_another_round():
    def records(units):
        out = []
        for (framework, run), rows in units.groupby(["framework", "run_id"], sort=False):
            steady = [{"kind": "steady", "index": i + 1, "wall_s": 1000 / v, "samples": 1000, "steps": 4,
                       "step_end": i + 1, "loss": 0.5, "machine": None}
                      for i, v in enumerate(rows.loc[~rows["warmup"], "samples_per_s"])]
            point = {k: rows.iloc[0][k] for k in ("model", "duplicate", "batch", "devices", "strategy")}
            if isinstance(rows.iloc[0].get("variant"), str):
                point["variant"] = rows.iloc[0]["variant"]
            out.append((f"results/runs/mnist/{framework}/{run}.json",
                        {"run_set": "mnist", "framework": framework, "run_id": run, "point": point,
                         "spec": {"repeat": int(rows.iloc[0]["repeat"])}, "status": "ok", "units": steady,
                         "wall_s": 10.0}))
        return out

    measurement = {"repeats": 3, "max_repeats": 6, "budget_minutes": 10, "same_threshold": 0.05, "confidence": 0.95,
                   "resamples": RESAMPLES, "min_unit_seconds": 0.0, "max_other_cpus": 0.5}
    open_plan = plan(records(ab_units(0.97, between=0.06, seed=3)), 4, measurement)
    assert {p["status"] for p in open_plan["points"]} == {ANOTHER_ROUND} and len(open_plan["records"]) == 2
    assert any("variant~b_repeat~4" in path for path in open_plan["records"])
    decided = plan(records(ab_units(1.0)), 4, measurement)
    assert {p["status"] for p in decided["points"]} == {"resolved"} and not decided["records"]


AB_CONFIG = {
    "frameworks": ["pytorch"], "workloads": ["mnist"], "studies": [],
    # sequential turns (the smoke preset's two runs at once leave a job one core, too few for a duet)
    "variants": {"pytorch-b": {"framework": "pytorch", "allocator": "framework-default", "schedule": "sequential"}},
    "measurement": {"repeats": 2, "max_repeats": 2, "steady_units": 2, "min_unit_seconds": 0.0, "min_unit_steps": 2,
                    "max_unit_steps": 2, "max_warmup_units": 1, "runs_at_once": 2, "max_contended_reruns": 0},
    "mnist": {"models": ["small"], "batches": [64], "devices": [1], "modes": {"pytorch": ["eager"]},
              "convergence_epochs": 1, "train_images": {"small": 256}, "test_images": {"small": 100}},
}


@pytest.mark.slow
def test_an_a_b_in_one_run_records_both_sides_gives_verdicts_and_reruns_only_the_variant_it_changes(tmp_path):
    root = copy_workflow(tmp_path / "workflow")
    (root / "ab.yaml").write_text(yaml.safe_dump(AB_CONFIG))
    proc = snakemake("--cores", "2", "--configfile", "ab.yaml", cwd=root)
    assert "dlbench A/B: 1 points:" in proc.stderr and "results/tables/ab.csv" in proc.stderr
    runs = root / "results" / "runs" / "mnist" / "pytorch"
    base = [json.loads(p.read_text()) for p in sorted(runs.glob("*.json")) if "variant~" not in p.name]
    variant = [json.loads(p.read_text()) for p in sorted(runs.glob("*_variant~pytorch-b_*.json"))]
    assert len(base) == len(variant) == 2 and all(r["status"] == "ok" for r in base + variant)
    # the same start and order on both sides; the policy each training process started with
    assert {r["initial_weights"]["sha256"] for r in base + variant} == {base[0]["initial_weights"]["sha256"]}
    assert all(FIXED_TUNABLES in r["numerics"]["allocator"]["glibc_tunables"] for r in base)
    assert all(r["numerics"]["allocator"] == {"policy": "framework-default", "glibc_tunables": None} for r in variant)
    assert all(r["point"]["variant"] == "pytorch-b" and "variant" not in b["point"] for r, b in zip(variant, base))
    found = pd.read_csv(root / "results" / "tables" / "ab.csv")
    assert list(found["variant"]) == ["pytorch-b"] and list(found["framework"]) == ["pytorch"]
    assert found["verdict"].iloc[0].split(" at ")[0] in ("faster", "slower", "same", "not resolved")
    assert "pytorch-b / pytorch" in (root / "results" / "ab" / "summary.html").read_text()
    runs_table = pd.read_csv(root / "results" / "tables" / "mnist-runs.csv")
    assert set(zip(runs_table["variant"].fillna(""), runs_table["allocator"])) == {
        ("", "fixed"), ("pytorch-b", "framework-default")}
    # a variant's setting changed: its runs and what reads them run again, the framework's do not
    changed = {**AB_CONFIG, "variants": {"pytorch-b": {"framework": "pytorch", "denormals": "framework-default",
                                                       "schedule": "sequential"}}}
    (root / "changed.yaml").write_text(yaml.safe_dump(changed))
    dry = snakemake("-n", "--configfile", "changed.yaml", cwd=root)
    planned = [line.split("output: ")[1] for line in dry.stdout.splitlines() if "output: results/runs/" in line]
    assert planned and all("variant~pytorch-b" in path for path in planned), planned
    assert len(planned) == 2


def test_a_variant_with_its_own_env_file_runs_in_its_venv_and_the_framework_in_its_own(tmp_path):
    root = copy_workflow(tmp_path / "workflow")
    (root / "envs" / "pytorch-next.yaml").write_text((root / "envs" / "pytorch.yaml").read_text() + "# a pin changed\n")
    (root / "ab.yaml").write_text(yaml.safe_dump({**AB_CONFIG, "variants": {
        "pytorch-next": {"framework": "pytorch", "env": "pytorch-next", "schedule": "sequential"}}}))
    dry = snakemake("-n", "--configfile", "ab.yaml", "--forceall", cwd=root)
    jobs = [block for block in dry.stdout.split("\n\n") if "output: results/runs/mnist/" in block]
    assert len(jobs) == 4
    for job in jobs:
        venvs = {Path(part.strip().rstrip(",")).parent.name.rsplit("-", 1)[0]
                 for part in job.split("input: ")[1].split("\n")[0].split(", ") if part.strip().endswith("/python")}
        assert venvs == ({"pytorch-next"} if "variant~pytorch-next" in job else {"pytorch"}), job


def test_a_variant_takes_turns_with_its_framework_in_every_round(tmp_path):
    """Every repeat 1 before any repeat 2, the variant and its framework in turn: the first in one
    repeat is the second in the next (dlbench.plan, Run.priority)."""
    (tmp_path / "ab.yaml").write_text(yaml.safe_dump({**AB_CONFIG, "measurement": {
        **AB_CONFIG["measurement"], "repeats": 3, "max_repeats": 3}}))
    dry = snakemake("-n", "--configfile", str(tmp_path / "ab.yaml"), "--forceall")
    priority = {}
    for job in dry.stdout.split("\n\n"):
        if "output: results/runs/mnist/" in job:
            output = job.split("output: ")[1].split("\n")[0]
            priority[output] = int(job.split("priority: ")[1].split("\n")[0])
    order = [path.split("/")[-1] for path in sorted(priority, key=priority.get, reverse=True)]
    repeats = [int(name.split("repeat~")[1].removesuffix(".json")) for name in order]
    assert repeats == sorted(repeats) and len(order) == 6
    firsts = ["variant~" in name for name in order[::2]]
    assert firsts in ([False, True, False], [True, False, True])
