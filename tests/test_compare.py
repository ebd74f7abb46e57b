import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from conftest import REPO, SCRIPTS, snakemake, venv_python
from dlbench.stats import compare
from test_stats import noisy, point_rows, table

RESAMPLES = 500
VERDICTS = {"small": "faster", "large": "slower", "tiny": "same", "gone": "only in old"}


def results(unchanged_seed, noise=0.005):
    """Old and new units of four MNIST points: small 30% faster, large 30% slower, tiny the same
    (fresh noise), gone only in old."""
    old = table(*(point_rows("pytorch", noisy(100, noise=noise, seed=i), model=model)
                  for i, model in enumerate(VERDICTS)))
    new = table(point_rows("pytorch", noisy(130, noise=noise, seed=5), model="small"),
                point_rows("pytorch", noisy(70, noise=noise, seed=6), model="large"),
                point_rows("pytorch", noisy(100, noise=noise, seed=unchanged_seed), model="tiny"))
    return old, new


def test_verdicts_of_a_faster_a_slower_an_unchanged_and_a_vanished_point():
    old, new = results(unchanged_seed=7)
    found = compare(old, new, resamples=RESAMPLES)
    assert dict(zip(found["model"], found["verdict"])) == VERDICTS
    assert list(found["model"])[-1] == "gone"
    assert found.iloc[-1][["old_mean", "new_mean", "ratio", "ci_low", "ci_high", "repeats_needed"]].isna().all()
    faster = found.set_index("model").loc["small"]
    assert faster["ratio"] == pytest.approx(1.3, rel=0.03) and faster["ci_low"] < faster["ratio"] < faster["ci_high"]
    assert faster["ci_low"] > 1.05
    assert list(found.columns) == ["workload", "framework", "model", "duplicate", "batch", "devices", "strategy",
                                   "old_mean", "new_mean", "ratio", "ci_low", "ci_high", "repeats_needed", "verdict"]


def test_a_change_within_the_threshold_is_the_same_and_one_the_interval_cannot_place_is_not_resolved():
    old = table(point_rows("pytorch", noisy(100, noise=0.001, seed=1)))
    new = table(point_rows("pytorch", noisy(103, noise=0.001, seed=2)))
    row = compare(old, new, resamples=RESAMPLES).iloc[0]
    assert row["ci_low"] > 1 and row["verdict"] == "same"  # real, but within 5%
    assert compare(old, new, threshold=0.01, resamples=RESAMPLES).iloc[0]["verdict"] == "faster"
    # a 4% change measured with 5% noise between processes: its interval straddles 1.05
    rng = np.random.default_rng(4)
    old = table(point_rows("pytorch", (100 * rng.lognormal(0, 0.05, (3, 1)) * np.ones((1, 3))).tolist()))
    new = table(point_rows("pytorch", (104 * rng.lognormal(0, 0.05, (3, 1)) * np.ones((1, 3))).tolist()))
    row = compare(old, new, resamples=RESAMPLES).iloc[0]
    assert row["verdict"] == "not resolved at 3 repeats" and row["repeats_needed"] > 3


def test_a_point_only_in_new_comes_last():
    old, new = results(unchanged_seed=7)
    found = compare(new, old, resamples=RESAMPLES)
    assert list(found["verdict"])[-1] == "only in new" and list(found["model"])[-1] == "gone"


def run_compare(*args):
    return subprocess.run([venv_python("report"), str(SCRIPTS / "compare.py"), *map(str, args)], check=False,
                          capture_output=True, text=True)


def test_the_command_writes_the_table_and_the_figure(tmp_path):
    old, new = results(unchanged_seed=7)
    for name, units in (("old", old), ("new", new)):
        (tmp_path / name / "tables").mkdir(parents=True)
        units.to_csv(tmp_path / name / "tables" / "mnist-units.csv", index=False)
    out = tmp_path / "out"
    proc = run_compare(tmp_path / "old", tmp_path / "new", "--csv", out / "compare.csv", "--figure",
                       out / "compare.png", "--resamples", RESAMPLES)
    assert proc.returncode == 0, proc.stderr
    assert "3 points: 1 faster, 1 slower, 1 same, 0 not resolved; 1 only in old" in proc.stdout
    found = pd.read_csv(out / "compare.csv")
    assert dict(zip(found["model"], found["verdict"])) == VERDICTS
    assert found["same_cpu"].all() and "different CPUs" not in proc.stderr
    assert (out / "compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_results_from_two_cpus_are_compared_with_a_warning(tmp_path):
    old, new = results(unchanged_seed=7)
    cpus = {"old": ("AuthenticAMD family 26 model 2 stepping 1 AMD EPYC", "avx avx2 fma avx512f"),
            "new": ("GenuineIntel family 6 model 143 stepping 8 Intel Xeon", "avx avx2 fma avx512f amx_tile")}
    for name, units in (("old", old), ("new", new)):
        (tmp_path / name / "tables").mkdir(parents=True)
        units.to_csv(tmp_path / name / "tables" / "mnist-units.csv", index=False)
        cpu, flags = cpus[name]
        pd.DataFrame([{"framework": "pytorch", "cpu_model": cpu.split(" ", 7)[-1], "cpu": cpu, "cpu_flags": flags}]).to_csv(
            tmp_path / name / "tables" / "mnist-environment.csv", index=False)
    proc = run_compare(tmp_path / "old", tmp_path / "new", "--csv", tmp_path / "c.csv", "--figure", tmp_path / "c.png",
                       "--resamples", RESAMPLES)
    assert proc.returncode == 0, proc.stderr
    assert "different CPUs" in proc.stderr and "Intel Xeon" in proc.stderr and "AMD EPYC" in proc.stderr
    assert not pd.read_csv(tmp_path / "c.csv")["same_cpu"].any()


def test_a_folder_without_units_tables_is_named(tmp_path):
    (tmp_path / "empty" / "tables").mkdir(parents=True)
    (tmp_path / "new" / "tables").mkdir(parents=True)
    table(point_rows("pytorch", noisy(100))).to_csv(tmp_path / "new" / "tables" / "mnist-units.csv", index=False)
    proc = run_compare(tmp_path / "empty", tmp_path / "new", "--csv", tmp_path / "c.csv", "--figure",
                       tmp_path / "c.png")
    assert proc.returncode != 0
    assert str(tmp_path / "empty") in proc.stderr and "units" in proc.stderr
    assert not (tmp_path / "c.csv").exists()


SMOKE = ("--configfile", "presets/smoke.yaml")


def test_the_compare_target_needs_a_baseline_and_is_not_in_the_default_target():
    assert 'include: "rules/compare.smk"' in (REPO / "Snakefile").read_text(), "the Snakefile must include compare.smk"
    proc = snakemake("-n", "compare", *SMOKE, check=False)
    assert proc.returncode != 0 and "compare.baseline" in proc.stdout + proc.stderr
    assert "rule compare:" not in snakemake("-n", "--forceall", *SMOKE).stdout


def test_the_compare_target_reads_the_baseline_given_on_the_command_line(tmp_path):
    baseline = tmp_path / "before" / "results"
    (baseline / "tables").mkdir(parents=True)
    table(point_rows("pytorch", noisy(100))).to_csv(baseline / "tables" / "mnist-units.csv", index=False)
    out = snakemake("-n", "-p", "compare", *SMOKE, "--config", f"compare={{baseline: {baseline}}}").stdout
    assert "rule compare:" in out and str(baseline / "tables" / "mnist-units.csv") in out
    assert f"compare.py {baseline} results --csv results/tables/compare.csv" in out


# ---- calibration: how often compare is wrong --------------------------------------------------

# This machine's size of noise: the unit-to-unit CV within a run and the run-to-run CV of a
# run's mean (separate processes). Within: the steady units of the default run's points
# (results/tables/*-points.csv, cv_within: mostly 1-5%); between: their cv_between. Both
# checked against a default run's tables in the closing note of the issue that made this.
SIGMA_WITHIN = 0.04
SIGMA_BETWEEN = 0.05
POINTS = 200


def simulated(change, repeats, units, rng):
    """Old and new units tables of POINTS points, each side `repeats` processes of `units`
    units: a process's level drifts (lognormal, SIGMA_BETWEEN), its units scatter around it
    (SIGMA_WITHIN); the new side's throughput is `change` times the old's."""
    def side(scale):
        return [point_rows("pytorch", (scale * 100 * rng.lognormal(0, SIGMA_BETWEEN, (repeats, 1))
                                       * (1 + rng.normal(0, SIGMA_WITHIN, (repeats, units)))).tolist(),
                           batch=point) for point in range(POINTS)]
    return table(*side(1.0)), table(*side(change))


def verdict_rates(change, repeats=3, units=3, seed=0):
    old, new = simulated(change, repeats, units, np.random.default_rng(seed))
    verdicts = compare(old, new, resamples=RESAMPLES)["verdict"]
    return {v: float((verdicts == v).mean()) for v in ("faster", "slower", "same")}


@pytest.mark.parametrize("seed", [0])
def test_with_nothing_changed_at_most_5_percent_of_points_get_a_change(seed):
    rates = verdict_rates(1.0, seed=seed)
    print(f"A/A at 3 repeats of 3 units: {rates}")
    assert rates["faster"] + rates["slower"] <= 0.05


def test_a_25_percent_change_is_detected_in_at_least_80_percent_of_points_at_the_default_repeats():
    faster, slower = verdict_rates(1.25)["faster"], verdict_rates(1 / 1.25, seed=1)["slower"]
    print(f"detected at 3 repeats: 25% faster {faster:.2f}, 25% slower {slower:.2f}")
    assert faster >= 0.8 and slower >= 0.8


def test_repeats_needed_says_how_many_repeats_resolve_a_point():
    old, new = simulated(1.0, repeats=3, units=3, rng=np.random.default_rng(2))
    found = compare(old, new, resamples=RESAMPLES)
    needed = found["repeats_needed"].median()
    # with the noise above, an interval within +-5% needs about z^2 (2 cv^2) / 0.05^2 repeats a side
    expected = 1.96 ** 2 * 2 * (SIGMA_BETWEEN ** 2 + SIGMA_WITHIN ** 2 / 3) / 0.05 ** 2
    assert 0.5 * expected <= needed <= 2 * expected
    unresolved = found["verdict"].str.startswith("not resolved at 3 repeats")
    print(f"repeats needed (median) {needed}, expected {expected:.1f}; not resolved {unresolved.mean():.2f}")
    more = compare(*simulated(1.0, repeats=int(needed), units=3, rng=np.random.default_rng(3)), resamples=RESAMPLES)
    assert (more["verdict"] == "same").mean() > (found["verdict"] == "same").mean()
