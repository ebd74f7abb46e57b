"""Sequential repeats (dlbench.rounds): another round only for the points whose ratios are open,
within max_repeats and the budget; each point says why it stopped."""
import itertools
import json

import numpy as np
import pandas as pd
import pytest

from dlbench.rounds import ANOTHER_ROUND, plan, resolved, stopped, with_repeat
from dlbench.stats import point_statistics
from dlbench.tables import units_table
from conftest import copy_workflow, snakemake
from test_new_workload import add_toy_workload

MEASUREMENT = {"repeats": 3, "max_repeats": 6, "budget_minutes": 10, "same_threshold": 0.05, "confidence": 0.95,
               "resamples": 500, "min_unit_seconds": 0.0, "max_other_cpus": 0.5}


def record(framework, batch, repeat, rates, wall_s=20.0):
    """A record of the toy run set with steady units at `rates` samples/s."""
    run_id = f"batch~{batch}_repeat~{repeat}"
    units = [{"kind": "steady", "index": i + 1, "wall_s": batch / rate, "samples": batch, "steps": 1,
              "step_end": i + 1, "loss": 0.5, "machine": None} for i, rate in enumerate(rates)]
    return (f"results/runs/toy/{framework}/{run_id}.json",
            {"run_set": "toy", "framework": framework, "run_id": run_id, "point": {"batch": batch},
             "spec": {"repeat": repeat}, "status": "ok", "units": units, "wall_s": wall_s})


def records(means, repeats=3):
    """{(framework, batch): mean rate}: the repeats' means 4% apart, their units 0.5%."""
    spread = np.linspace(0.96, 1.04, repeats)
    return [record(framework, batch, repeat, mean * spread[repeat - 1] * np.array([0.995, 1.0, 1.005]))
            for (framework, batch), mean in means.items() for repeat in range(1, repeats + 1)]


# at batch 32 PyTorch and JAX are 2% apart: not resolved at 3 repeats 4% apart (neither the same
# within 5% nor separated); everything else is twice as fast or slow
MEANS = {("pytorch", 32): 100.0, ("jax", 32): 102.0, ("tensorflow", 32): 200.0,
         ("pytorch", 64): 100.0, ("jax", 64): 200.0, ("tensorflow", 64): 400.0}


def test_resolved_means_faster_slower_or_the_same_within_the_threshold():
    assert resolved(1.01, 1.2, 0.05) and resolved(0.8, 0.99, 0.05) and resolved(0.96, 1.04, 0.05)
    assert not resolved(0.97, 1.08, 0.05) and not resolved(np.nan, np.nan, 0.05)


def test_an_open_ratio_gets_one_more_round_for_its_two_points_only():
    result = plan(records(MEANS), 4, MEASUREMENT)
    assert result["records"] == ["results/runs/toy/jax/batch~32_repeat~4.json",
                                 "results/runs/toy/pytorch/batch~32_repeat~4.json"]
    status = {(p["subject"], p["point"]): p["status"] for p in result["points"]}
    assert status.pop(("jax", "batch~32_repeat~*")) == status.pop(("pytorch", "batch~32_repeat~*")) == ANOTHER_ROUND
    assert set(status.values()) == {"resolved"}
    assert result["planned_s"] == 40.0 and result["spent_s"] == 0


def test_a_point_stops_at_max_repeats_and_the_round_after_the_last_plans_nothing():
    result = plan(records(MEANS), 4, {**MEASUREMENT, "max_repeats": 3})
    assert result["records"] == []
    assert {p["status"] for p in result["points"] if p["point"].startswith("batch~32") and p["subject"] != "tensorflow"} \
        == {"max_repeats"}


def test_the_budget_stops_the_rounds_counting_what_the_earlier_rounds_took():
    done = records(MEANS)
    later = [record(framework, 32, 4, [100.0] * 3, wall_s=290.0) for framework in ("pytorch", "jax")]
    result = plan(done + later, 5, MEASUREMENT)  # 580 s of the 600 spent: no 20-second run fits
    assert result["spent_s"] == 580.0 and result["records"] == []
    assert sorted(p["status"] for p in result["points"] if p["open_ratios"]) == ["budget", "budget"]


def test_after_the_last_round_a_point_the_budget_left_short_of_max_repeats_says_budget():
    done = records(MEANS)  # 3 repeats each; round 7 comes after max_repeats (6)
    result = plan(done, 7, MEASUREMENT)
    assert result["records"] == []
    assert {p["status"] for p in result["points"] if p["open_ratios"]} == {"budget"}


def test_the_points_table_says_why_each_point_stopped():
    done = records(MEANS)
    result = plan(done, 4, {**MEASUREMENT, "max_repeats": 3})
    units = units_table([r for _, r in done], 0.0, 0.5)
    points = point_statistics(units, resamples=200)
    points["stopped"] = stopped(points, result)
    by = {(row.framework, row.batch): row.stopped for row in points.itertuples()}
    assert by[("pytorch", 32)] == "max_repeats" and by[("tensorflow", 64)] == "resolved"


def library_record(library, repeat, rates):
    """A record of a run set of no framework (as ChestX-ray's image libraries): its framework None."""
    run_id = f"library~{library}_format~jpeg_repeat~{repeat}"
    units = [{"kind": "steady", "index": i + 1, "wall_s": 64 / rate, "samples": 64, "steps": 1, "step_end": i + 1,
              "loss": None, "machine": None} for i, rate in enumerate(rates)]
    return (f"results/runs/toy-library/{library}/{run_id}.json",
            {"run_set": "toy-library", "framework": None, "run_id": run_id,
             "point": {"format": "jpeg", "library": library}, "spec": {"repeat": repeat}, "status": "ok",
             "units": units, "wall_s": 5.0})


def test_points_of_no_framework_get_their_rounds_too():
    """Their group keys hold NaN for the framework, which two groupbys give as two unequal NaNs."""
    spread = np.linspace(0.96, 1.04, 3)
    done = [library_record(library, repeat, mean * spread[repeat - 1] * np.array([0.995, 1.0, 1.005]))
            for library, mean in {"pillow": 100.0, "opencv": 102.0, "pillow-simd": 300.0}.items()
            for repeat in range(1, 4)]
    result = plan(done, 4, MEASUREMENT)
    assert result["records"] == ["results/runs/toy-library/opencv/library~opencv_format~jpeg_repeat~4.json",
                                 "results/runs/toy-library/pillow/library~pillow_format~jpeg_repeat~4.json"]
    assert {p["subject"]: p["status"] for p in result["points"]}["pillow-simd"] == "resolved"


def test_with_repeat_names_the_same_point_at_another_repeat():
    assert with_repeat("results/runs/mnist/jax/model~small_repeat~3_x~1.json", 4) == \
        "results/runs/mnist/jax/model~small_repeat~4_x~1.json"


# ---- the workflow: a checkpoint that plants its rounds ---------------------------------------

ADAPTIVE = """measurement:
  repeats: 2
  max_repeats: 3
  budget_minutes: 30
toy:
  batches: [32, 64]
"""


def planted(path, rates):
    """Rewrite a finished record's steady units to run at `rates` samples/s (one a unit, in turn),
    on a quiet machine: no other process beside them (else a loaded CI machine sets them aside)."""
    record = json.loads(path.read_text())
    steady = [unit for unit in record["units"] if unit["kind"] == "steady"]
    for unit, rate in zip(steady, itertools.cycle(rates)):
        unit["wall_s"] = unit["samples"] / rate
        unit["machine"] = {**(unit.get("machine") or {}), "other_cpu_s": 0.0}
    path.write_text(json.dumps(record))


@pytest.mark.slow
def test_an_open_verdict_gets_one_more_round_for_its_points_only_and_a_finished_run_plans_nothing(tmp_path):
    workflow = copy_workflow(tmp_path)
    add_toy_workload(workflow)
    (workflow / "adaptive.yaml").write_text(ADAPTIVE)
    run = ("--configfile", "presets/smoke.yaml", "adaptive.yaml", "--config", "workloads=[toy]", "studies=[]",
           "frameworks=[pytorch,jax]")
    first = [f"results/runs/toy/{fw}/batch~{batch}_repeat~{repeat}.json"
             for fw in ("pytorch", "jax") for batch in (32, 64) for repeat in (1, 2)]
    snakemake("--cores", "2", *first, *run, cwd=workflow)  # the first round, really run
    # planted: at batch 32 PyTorch and JAX within each other's noise (open), at 64 twice apart (resolved)
    rates = {("pytorch", 32): (96.0, 104.0), ("jax", 32): (98.0, 106.0), ("pytorch", 64): (100.0, 101.0),
             ("jax", 64): (200.0, 202.0)}
    for fw, batch in rates:
        for repeat in (1, 2):
            planted(workflow / f"results/runs/toy/{fw}/batch~{batch}_repeat~{repeat}.json",
                    [rates[fw, batch][repeat - 1]])

    snakemake("--cores", "2", *run, cwd=workflow)
    third = json.loads((workflow / "results/repeats/round-3.json").read_text())
    assert third["records"] == ["results/runs/toy/jax/batch~32_repeat~3.json",
                                "results/runs/toy/pytorch/batch~32_repeat~3.json"]
    assert sorted((workflow / "results/runs/toy").glob("*/*repeat~3.json")) == \
        [workflow / path for path in third["records"]]
    last = json.loads((workflow / "results/repeats/round-4.json").read_text())  # past max_repeats: plans nothing
    assert last["records"] == [] and not (workflow / "results/repeats/round-5.json").exists()
    points = pd.read_csv(workflow / "results/tables/toy-points.csv")
    # a really run repeat 3 beside other load is set aside (dlbench.stats.set_aside) but still ran
    ran = {(row.framework, row.batch): row.repeats + (len(row.set_aside.split(",")) if isinstance(row.set_aside, str)
                                                      and row.set_aside else 0) for row in points.itertuples()}
    stops = {(row.framework, row.batch): (ran[row.framework, row.batch], row.stopped) for row in points.itertuples()}
    assert stops[("pytorch", 64)] == stops[("jax", 64)] == (2, "resolved")
    assert stops[("pytorch", 32)][0] == stops[("jax", 32)][0] == 3
    assert {stops[("pytorch", 32)][1], stops[("jax", 32)][1]} <= {"resolved", "max_repeats"}

    again = snakemake("-n", *run, cwd=workflow)
    assert "Nothing to be done" in again.stdout + again.stderr
