"""Duet (config variants, schedule: duet): a variant's run and its framework's at the same point start
together, each on half of the job's cores, and the A/B takes their ratio pair by pair. docs/ab.md says
what these tests hold it to."""
import json
import re

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import REPO, copy_workflow, snakemake
from dlbench.config import load_config
from dlbench.duet import halves
from dlbench.errors import ConfigError
from dlbench.rounds import ANOTHER_ROUND, plan
from dlbench.stats import ab_verdicts, ratios
from dlbench.sweep import duet_sides, run_id, with_variants
from dlbench.workloads.mnist.definition import spec as mnist_spec
from test_stats import point_rows, table

RESAMPLES = 500
DUET = {"d": {"framework": "pytorch", "env": None, "denormals": None, "allocator": None, "threads": None,
              "environment": {}, "schedule": "duet"}}


def test_a_duet_variant_runs_in_pairs_with_its_framework_both_sides_naming_the_duet():
    rows = [{"framework": "pytorch", "batch": b, "repeat": 1} for b in (32, 64)]
    found = with_variants(rows, DUET)
    names = [run_id(row, ("batch", "repeat")) for row in found]
    assert names == ["batch~32_repeat~1", "batch~64_repeat~1",
                     "batch~32_duet~d_repeat~1", "batch~32_variant~d_duet~d_repeat~1",
                     "batch~64_duet~d_repeat~1", "batch~64_variant~d_duet~d_repeat~1"]
    framework_side, variant_side = (f"results/runs/mnist/pytorch/{name}.json" for name in names[2:4])
    assert duet_sides(framework_side) == duet_sides(variant_side) == (framework_side, variant_side)
    assert duet_sides("results/runs/mnist/pytorch/batch~32_variant~d_repeat~1.json") is None


def test_each_side_of_a_duet_has_half_the_threads_and_the_other_side_is_not_contention():
    config = load_config(REPO / "config.yaml")
    config["variants"] = DUET
    row = {"framework": "pytorch", "model": "small", "duplicate": 1, "batch": 256, "devices": 1, "nodes": 1,
           "strategy": "none", "mode": "eager", "repeat": 1}
    alone = mnist_spec(config, row, 4)
    framework_side = mnist_spec(config, {**row, "duet": "d"}, 4)
    variant_side = mnist_spec(config, {**row, "variant": "d", "duet": "d"}, 4)
    assert (alone.threads, framework_side.threads, variant_side.threads) == (4, 2, 2)
    limit = config["measurement"]["max_other_cpus"]
    assert alone.measure.max_other_cpus == limit and variant_side.measure.max_other_cpus == limit + 2
    assert framework_side.sweep_point() == {**alone.sweep_point(), "duet": "d"}
    assert variant_side.sweep_point() == {**alone.sweep_point(), "variant": "d", "duet": "d"}
    assert (framework_side.seed, framework_side.data) == (variant_side.seed, variant_side.data) == (alone.seed, alone.data)


def test_the_sides_swap_halves_of_the_cores_each_repeat():
    assert halves({0, 1}, repeat=1) == ([0], [1]) and halves({0, 1}, repeat=2) == ([1], [0])
    assert halves({4, 5, 6}, repeat=1) == ([4], [5, 6])


def test_a_duet_variant_is_measured_against_its_own_pair_not_against_its_framework_alone():
    # the framework alone at 100/s on every core; in the duet both sides at 50/s: the A/A's ratio is 1
    units = table(point_rows("pytorch", [[100.0, 101.0, 99.0]] * 3, variant=np.nan, duet=np.nan),
                  point_rows("pytorch", [[50.0, 50.5, 49.5]] * 3, variant=np.nan, duet="d"),
                  point_rows("pytorch", [[50.2, 49.8, 50.0]] * 3, variant="d", duet="d"),
                  point_rows("jax", [[80.0, 80.5, 79.5]] * 3, variant=np.nan, duet=np.nan))
    found = ab_verdicts(units, resamples=RESAMPLES)
    assert len(found) == 1 and found.iloc[0]["ratio"] == pytest.approx(1.0, abs=0.01)
    assert found.iloc[0]["verdict"] == "same" and found.iloc[0]["duet"] == "d"
    # the duet's sides stay out of the ratios between frameworks
    assert set(ratios(units, resamples=RESAMPLES)["comparison"]) == {"pytorch / jax", "d / pytorch"}


def test_a_duet_s_verdict_is_taken_pair_by_pair_so_what_moves_both_sides_cancels():
    """Each pair's machine (15% between pairs) moves both sides alike: the pairs' ratios agree within
    1%, and their interval decides at 6 pairs what the sides' own spreads, taken apart, cannot."""
    rng = np.random.default_rng(5)
    machine = rng.lognormal(0, 0.15, 6)
    sides = [[[100 * m * rng.lognormal(0, 0.01) for _ in range(3)] for m in machine] for _ in range(2)]
    duet = table(point_rows("pytorch", sides[0], variant=np.nan, duet="d"),
                 point_rows("pytorch", sides[1], variant="d", duet="d"))
    apart = table(point_rows("pytorch", sides[0], variant=np.nan, duet=np.nan),
                  point_rows("pytorch", sides[1], variant="d", duet=np.nan))
    paired, unpaired = (ab_verdicts(units, resamples=RESAMPLES).iloc[0] for units in (duet, apart))
    assert paired["verdict"] == "same" and paired["ci_high"] - paired["ci_low"] < 0.05
    assert unpaired["verdict"].startswith("not resolved") and paired["repeats_needed"] < unpaired["repeats_needed"]
    assert paired["ratio"] == pytest.approx(unpaired["ratio"])


def test_a_round_that_plans_one_side_of_a_duet_plans_the_other():
    def record(name, values, point):
        steady = [{"kind": "steady", "index": i + 1, "wall_s": 1000 / v, "samples": 1000, "steps": 4,
                   "step_end": i + 1, "loss": 0.5, "machine": None} for i, v in enumerate(values)]
        return (f"results/runs/mnist/pytorch/{name}.json",
                {"run_set": "mnist", "framework": "pytorch", "run_id": name, "point": point,
                 "spec": {"repeat": int(name[-1])}, "status": "ok", "units": steady, "wall_s": 10.0})

    rng = np.random.default_rng(3)
    records = []
    for repeat in (1, 2, 3):
        for variant in (None, "d"):
            name = f"batch~64{f'_variant~{variant}' if variant else ''}_duet~d_repeat~{repeat}"
            point = {"batch": 64, "duet": "d", **({"variant": variant} if variant else {})}
            records.append(record(name, (50 * rng.lognormal(0, 0.08) * rng.lognormal(0, 0.005, 3)).tolist(), point))
    measurement = {"repeats": 3, "max_repeats": 6, "budget_minutes": 0.1, "same_threshold": 0.05,
                   "confidence": 0.95, "resamples": RESAMPLES, "min_unit_seconds": 0.0, "max_other_cpus": 0.5}
    found = plan(records, 4, measurement)
    # a pair's job took 10 s, half of it each side's: 6 s of budget fit one side's 5 s, not the other's;
    # the pair runs as one job all the same
    assert [p["cost_s"] for p in found["points"]] == [5.0, 5.0]
    assert sorted(p["status"] for p in found["points"]) == [ANOTHER_ROUND, "budget"]
    assert found["records"] == ["results/runs/mnist/pytorch/batch~64_duet~d_repeat~4.json",
                                "results/runs/mnist/pytorch/batch~64_variant~d_duet~d_repeat~4.json"]


def test_a_duet_with_threads_of_its_own_or_on_one_core_is_refused_naming_the_key(tmp_path):
    path = tmp_path / "duet.yaml"
    path.write_text(yaml.safe_dump({"frameworks": ["pytorch"], "variants": {
        "d": {"framework": "pytorch", "schedule": "duet", "threads": 1}}}))
    with pytest.raises(ConfigError, match="variants.d.threads: a duet's two sides run on half"):
        load_config(REPO / "config.yaml", path)
    path.write_text(yaml.safe_dump({"frameworks": ["pytorch"], "variants": {"d": {"framework": "pytorch",
                                                                                  "schedule": "duet"}}}))
    proc = snakemake("-n", "--cores", "1", "--configfile", str(path), check=False)
    assert proc.returncode != 0 and "variants.d.schedule: a duet runs its two sides on half" in proc.stdout + proc.stderr


def test_a_duet_of_two_env_files_runs_each_side_in_its_own_venv(tmp_path):
    root = copy_workflow(tmp_path / "workflow")
    (root / "envs" / "pytorch-next.yaml").write_text((root / "envs" / "pytorch.yaml").read_text() + "# a pin changed\n")
    (root / "duet.yaml").write_text(yaml.safe_dump({**DUET_CONFIG, "variants": {
        "pytorch-next": {"framework": "pytorch", "env": "pytorch-next"}}}))   # schedule: duet, the default
    dry = snakemake("-n", "-p", "--configfile", "duet.yaml", "--forceall", cwd=root)
    [job] = [block for block in dry.stdout.split("\n\n") if "rule train_duet:" in block and "repeat~1.json" in block]
    command = job.split("dlbench.duet")[1]
    sides = command.split("--side ")[1:]
    assert len(sides) == 2 and "/pytorch-" in sides[0].split()[0] and "/pytorch-next-" in sides[1].split()[0], command


DUET_CONFIG = {
    "frameworks": ["pytorch"], "workloads": ["mnist"], "studies": [],
    "variants": {"pytorch-d": {"framework": "pytorch", "schedule": "duet"}},
    "measurement": {"repeats": 2, "max_repeats": 2, "steady_units": 2, "min_unit_seconds": 0.0, "min_unit_steps": 2,
                    "max_unit_steps": 2, "max_warmup_units": 1, "max_contended_reruns": 0},
    "mnist": {"models": ["small"], "batches": [64], "devices": [1], "modes": {"pytorch": ["eager"]},
              "convergence_epochs": 1, "train_images": {"small": 256}, "test_images": {"small": 100}},
}


@pytest.mark.slow
def test_a_duet_runs_both_sides_at_once_on_their_halves_of_the_cores_and_gives_a_verdict(tmp_path):
    root = copy_workflow(tmp_path / "workflow")
    (root / "duet.yaml").write_text(yaml.safe_dump(DUET_CONFIG))
    proc = snakemake("--cores", "2", "--configfile", "duet.yaml", cwd=root)
    assert "dlbench A/B: 1 points:" in proc.stderr
    assert "duet: " not in proc.stderr  # where each side ran is in its own log, not the terminal
    logs = root / "results" / "logs" / "runs" / "mnist" / "pytorch"
    side_logs = sorted(logs.glob("*_duet~pytorch-d_repeat~1.log"))
    assert len(side_logs) == 2
    for log in side_logs:
        assert re.fullmatch(r"duet: \S+_duet~pytorch-d_repeat~1 on CPUs [01]", log.read_text().splitlines()[0])
    runs = root / "results" / "runs" / "mnist" / "pytorch"
    for repeat in (1, 2):
        paths = sorted(runs.glob(f"*_duet~pytorch-d_repeat~{repeat}.json"), key=lambda p: "_variant~" in p.name)
        assert len(paths) == 2 and "_variant~pytorch-d_" in paths[1].name
        framework_side, variant_side = (json.loads(p.read_text()) for p in paths)
        assert framework_side["status"] == variant_side["status"] == "ok"
        assert (framework_side["spec"]["threads"], variant_side["spec"]["threads"]) == (1, 1)
        # each on its own core, the halves swapped between repeats, and at the same time
        cpus = (framework_side["environment"]["cpus"], variant_side["environment"]["cpus"])
        assert cpus == (([0], [1]) if repeat == 1 else ([1], [0]))
        starts = [pd.Timestamp(r["started_at"]) for r in (framework_side, variant_side)]
        ends = [start + pd.Timedelta(seconds=r["wall_s"]) for start, r in zip(starts, (framework_side, variant_side))]
        assert max(starts) < min(ends)
    found = pd.read_csv(root / "results" / "tables" / "ab.csv")
    assert list(found["variant"]) == ["pytorch-d"] and list(found["duet"]) == ["pytorch-d"]
    assert "(duet)" in (root / "results" / "ab" / "summary.html").read_text()
