import subprocess
import sys

import pandas as pd
import pytest

from conftest import REPO, SCRIPTS, snakemake, venv_python
from dlbench.stats import compare
from test_stats import noisy, point_rows, table

RESAMPLES = 500
VERDICTS = {"small": "faster", "large": "slower", "tiny": "same", "gone": "only in old"}


def results(unchanged_seed):
    """Old and new units of four MNIST points: small 30% faster, large 30% slower, tiny the same
    (fresh noise), gone only in old."""
    old = table(*(point_rows("pytorch", noisy(100, seed=i), model=model) for i, model in enumerate(VERDICTS)))
    new = table(point_rows("pytorch", noisy(130, seed=5), model="small"),
                point_rows("pytorch", noisy(70, seed=6), model="large"),
                point_rows("pytorch", noisy(100, seed=unchanged_seed), model="tiny"))
    return old, new


def test_verdicts_of_a_faster_a_slower_an_unchanged_and_a_vanished_point():
    old, new = results(unchanged_seed=7)
    found = compare(old, new, resamples=RESAMPLES)
    assert dict(zip(found["model"], found["verdict"])) == VERDICTS
    assert list(found["model"])[-1] == "gone"
    assert found.iloc[-1][["old_median", "new_median", "ratio", "ci_low", "ci_high", "p_value"]].isna().all()
    faster = found.set_index("model").loc["small"]
    assert faster["ratio"] == pytest.approx(1.3, rel=0.03) and faster["ci_low"] < faster["ratio"] < faster["ci_high"]
    assert faster["p_value"] < 0.05
    assert list(found.columns) == ["workload", "framework", "model", "duplicate", "batch", "devices", "strategy",
                                   "old_median", "new_median", "ratio", "ci_low", "ci_high", "p_value", "verdict"]


def test_a_significant_change_within_the_threshold_is_the_same():
    old = table(point_rows("pytorch", noisy(100, noise=0.001, seed=1)))
    new = table(point_rows("pytorch", noisy(103, noise=0.001, seed=2)))
    row = compare(old, new, resamples=RESAMPLES).iloc[0]
    assert row["p_value"] < 0.05 and row["verdict"] == "same"
    assert compare(old, new, threshold=0.01, resamples=RESAMPLES).iloc[0]["verdict"] == "faster"


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
    assert "3 points: 1 faster, 1 slower, 1 same; 1 only in old" in proc.stdout
    found = pd.read_csv(out / "compare.csv")
    assert dict(zip(found["model"], found["verdict"])) == VERDICTS
    assert (out / "compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


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
