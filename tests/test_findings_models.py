"""A workload's other model against its own on the same data (the findings' scripts/models.py: IMDB's
Transformer against its LSTM), framework by framework, and the first view's finding of it: read from
planted tables (units, points, ratios, runs) of the two run sets, as the aggregate writes them."""
import pandas as pd
import pytest

from dlbench.stats import point_statistics, ratios
from conftest import report_python
from test_findings import FINDINGS, replication

OTHER, OWN = "imdb-transformer", "imdb"
TARGET = "test_accuracy >= 0.6"
FRAMEWORKS = ["pytorch", "tensorflow", "mxnet"]
MODES = {"pytorch": "eager", "tensorflow": "graph", "mxnet": "hybrid"}
BATCH, STEPS = 32, 10   # a unit: 10 steps of 32 reviews


def point(run_set, framework, mode=None, grad="dense"):
    """A point's keys as each run set's units table has them (the LSTM's grad among them)."""
    keys = {"batch": BATCH, "workers": 0}
    if run_set == OWN:
        keys["grad"] = grad
    return {**keys, "mode": mode or MODES[framework], "precision": "float32"}


def units(run_set, framework, rate, contended=False, **where):
    """Three repeats of three steady units about `rate` reviews/s (repeats 1% apart, units 0.5%)."""
    keys = point(run_set, framework, **where)
    run = "_".join(f"{k}~{v}" for k, v in keys.items())
    rows = []
    for repeat in (1, 2, 3):
        for unit in (1, 2, 3):
            speed = rate * (1 + 0.01 * (repeat - 2)) * (1 + 0.005 * (unit - 2))
            wall = BATCH * STEPS / speed
            rows.append({"run_set": run_set, "framework": framework, "run_id": f"{run}_repeat~{repeat}", **keys,
                         "repeat": repeat, "status": "ok", "unit": unit, "kind": "steady", "warmup": False,
                         "wall_s": wall, "samples": BATCH * STEPS, "steps": STEPS, "step": unit * STEPS,
                         "samples_per_s": speed, "loss": 0.5, "below_minimum": False, "contended": contended,
                         "precision_not_followed": False})
    return rows


def runs(run_set, framework, steps_to_target, **where):
    """Repeat 1 trains 80 convergence steps and reaches the target at `steps_to_target` (None: never);
    repeats 2 and 3 train none."""
    keys = point(run_set, framework, **where)
    run = "_".join(f"{k}~{v}" for k, v in keys.items())
    return [{"run_set": run_set, "framework": framework, "run_id": f"{run}_repeat~{repeat}", **keys, "repeat": repeat,
             "status": "ok", "numerics": "flush", "error": None, "segments": 2 if repeat == 1 else 0,
             "convergence_steps": 80 if repeat == 1 else 0, "target": TARGET,
             "steps_to_target": steps_to_target if repeat == 1 else None,
             "target_reached": (steps_to_target is not None) if repeat == 1 else None}
            for repeat in (1, 2, 3)]


# The LSTM at 400, 300 and 500 reviews/s, reaching the target in 40 steps; the Transformer: PyTorch twice
# the LSTM's rate, in 20 steps; TensorFlow as fast, contended throughout; MXNet half, never reaching it
# (and its imperative mode, not the default, 250 against the LSTM's 250). PyTorch's sparse LSTM point
# and Keras on JAX's Transformer have no counterpart.
LSTM = {"pytorch": 400, "tensorflow": 300, "mxnet": 500}
PLANTED = {
    OWN: {"units": [*(row for fw, rate in LSTM.items() for row in units(OWN, fw, rate)),
                    *units(OWN, "pytorch", 600, grad="sparse"), *units(OWN, "mxnet", 250, mode="imperative")],
          "runs": [*(row for fw in LSTM for row in runs(OWN, fw, 40)), *runs(OWN, "mxnet", 40, mode="imperative")]},
    OTHER: {"units": [*units(OTHER, "pytorch", 800), *units(OTHER, "tensorflow", 300, contended=True),
                      *units(OTHER, "mxnet", 250), *units(OTHER, "mxnet", 250, mode="imperative")],
            "runs": [*runs(OTHER, "pytorch", 20), *runs(OTHER, "tensorflow", 40), *runs(OTHER, "mxnet", None),
                     *runs(OTHER, "mxnet", 40, mode="imperative")]},
}


def plant(folder):
    """Each run set's units, points, ratios and runs tables (the points and ratios as the aggregate makes them)."""
    folder.mkdir(exist_ok=True)
    for name, tables in PLANTED.items():
        frame = pd.DataFrame(tables["units"])
        frame.to_csv(folder / f"{name}-units.csv", index=False)
        point_statistics(frame).to_csv(folder / f"{name}-points.csv", index=False)
        ratios(frame, frameworks=FRAMEWORKS).to_csv(folder / f"{name}-ratios.csv", index=False)
        pd.DataFrame(tables["runs"]).to_csv(folder / f"{name}-runs.csv", index=False)
        pd.DataFrame([{"framework": f, "framework_version": "1.0", "library": None, "library_version": None,
                       "cpu": "TestCPU family 1", "cpu_flags": "avx avx2", "cpu_count": 2, "gpus": "none",
                       "git_commit": "abcdef1234567"} for f in FRAMEWORKS]).to_csv(folder / f"{name}-environment.csv",
                                                                                  index=False)


def models(tmp_path, pairs=(f"{OTHER}:{OWN}:reviews",)):
    folder = tmp_path / "tables"
    plant(folder)
    table, figure = folder / "findings-models.csv", tmp_path / "figures" / "models.png"
    report_python(str(FINDINGS / "models.py"), "--tables-dir", str(folder), "--pairs", *pairs, "--resamples", "500",
                  "--table", str(table), "--figure", str(figure), check=True, capture_output=True)
    return pd.read_csv(table), figure


def test_each_framework_s_transformer_against_its_lstm_with_intervals(tmp_path):
    table, figure = models(tmp_path)
    rows = {(r["framework"], r["mode"]): r for _, r in table.iterrows()}
    # every framework's point that both ran, in each mode: no sparse LSTM, no Keras on JAX
    assert sorted(rows) == [("mxnet", "hybrid"), ("mxnet", "imperative"), ("pytorch", "eager"),
                            ("tensorflow", "graph")]
    assert "grad" not in table and set(table["reference"]) == {OWN} and set(table["target"]) == {TARGET}
    pytorch = rows[("pytorch", "eager")]
    assert pytorch["samples_per_s"] == pytest.approx(800, rel=1e-3)
    assert pytorch["reference_samples_per_s"] == pytest.approx(400, rel=1e-3)   # the dense LSTM, not the sparse
    assert pytorch["ratio"] == pytest.approx(2.0, rel=1e-3)
    assert 1.8 < pytorch["ratio_ci_low"] < 2.0 < pytorch["ratio_ci_high"] < 2.2 and pytorch["verdict"] == "faster"
    # 20 steps of 32 reviews at 800/s against 40 at 400/s: a quarter of the time, its interval the throughput's
    assert pytorch["steps_to_target"] == 20 and pytorch["reference_steps_to_target"] == 40
    assert pytorch["time_to_target_s"] == pytest.approx(20 * 32 / 800, rel=1e-3)
    assert pytorch["time_ci_low"] < pytorch["time_to_target_s"] < pytorch["time_ci_high"]
    assert pytorch["time_ratio"] == pytest.approx(0.25, rel=1e-3) and pytorch["time_verdict"] == "shorter"
    assert pytorch["time_ratio_ci_low"] == pytest.approx(0.5 / pytorch["ratio_ci_high"])
    # a contended side decides nothing, its figures still given
    tensorflow = rows[("tensorflow", "graph")]
    assert tensorflow["contended"] and tensorflow["ratio"] == pytest.approx(1.0, rel=1e-3)
    assert tensorflow["verdict"] == tensorflow["time_verdict"] == "not resolved (contended)"
    mxnet = rows[("mxnet", "hybrid")]
    assert mxnet["ratio"] == pytest.approx(0.5, rel=1e-3) and mxnet["verdict"] == "slower"
    assert pd.isna(mxnet["time_ratio"]) and mxnet["time_verdict"] == f"{OTHER}: not reached in 80 steps"
    assert rows[("mxnet", "imperative")]["verdict"] == "no difference within the noise"
    assert figure.stat().st_size > 10_000


def test_no_pair_or_no_run_of_both_is_an_empty_table_and_says_so(tmp_path):
    table, figure = models(tmp_path, pairs=())
    assert table.empty and "framework" in table and figure.stat().st_size > 0
    one_sided = tmp_path / "one"
    one_sided.mkdir()
    table, _ = models(one_sided, pairs=(f"{OTHER}:mnist:images",))   # a run set with no table here
    assert table.empty


def test_the_first_view_gives_the_transformer_a_column_and_a_finding_of_its_own(tmp_path):
    table, figure = models(tmp_path)
    folder = tmp_path / "tables"
    claims = replication({}, tmp_path, [OWN])
    claims.reset_index().to_csv(folder / "replication.csv", index=False)
    sets = [OWN, OTHER]
    paths = {kind: [str(folder / f"{name}-{kind}.csv") for name in sets]
             for kind in ("points", "ratios", "runs", "environment")}
    out = tmp_path / "summary.html"
    report_python(str(FINDINGS / "summary.py"), "--sets", *sets, "--samples", "reviews", "reviews",
                  "--points", *paths["points"], "--ratios", *paths["ratios"], "--runs", *paths["runs"],
                  "--environment", *paths["environment"], "--replication", str(folder / "replication.csv"),
                  "--models", str(folder / "findings-models.csv"), "--models-figure", str(figure),
                  "--figures", str(tmp_path / "figures"), "--frameworks", *FRAMEWORKS,
                  "--overview", str(folder / "findings-overview.csv"), "--out", str(out), check=True)
    page = out.read_text()
    # the first view: a column of its own, every framework against the Transformer's fastest
    overview = pd.read_csv(folder / "findings-overview.csv")
    transformer = overview[overview["run_set"] == OTHER].set_index("framework")
    assert list(transformer.index) == FRAMEWORKS and transformer.loc["pytorch", "ratio_to_fastest"] == 1.0
    assert transformer.loc["mxnet", "ratio_to_fastest"] == pytest.approx(250 / 800, rel=1e-2)
    assert transformer.loc["tensorflow", "flags"] == "contended"
    # the finding: framework by framework in the default modes, with intervals, then the fastest
    finding = page[page.index(f"{OTHER} against {OWN}, on the same data"):page.index("The studies' claims: this")]
    assert "<b>pytorch</b> (batch=32 workers=0 precision=float32): 800 [" in finding
    assert "reviews/s, 2.00 [" in finding and "x: faster; to the target in 0.8 [" in finding
    assert "(20 against 40 steps), 0.25 [" in finding and "x: shorter" in finding
    assert "<b>tensorflow</b>" in finding and "[contended]</sup>: not resolved (contended)" in finding
    assert f"no time to the target ({OTHER}: not reached in 80 steps)" in finding
    assert "imperative" not in finding   # not a default mode: the table has it
    assert f"Which framework trains {OTHER} fastest" in finding and "fastest pytorch, 800 [" in finding
    assert "ahead of" in finding and 'src="data:image/png;base64,' in finding
    assert page.index("The fastest at each point") < page.index(f"{OTHER} against {OWN}") < page.index("Marks:")


def test_the_first_view_without_a_second_model_says_nothing_of_one(tmp_path):
    """A run of the LSTM alone (imdb.models: [lstm]): no finding, no column, no figure inlined."""
    folder = tmp_path / "tables"
    plant(folder)
    claims = replication({}, tmp_path, [OWN])
    claims.reset_index().to_csv(folder / "replication.csv", index=False)
    out = tmp_path / "summary.html"
    report_python(str(FINDINGS / "summary.py"), "--sets", OWN, "--samples", "reviews",
                  "--points", str(folder / f"{OWN}-points.csv"), "--ratios", str(folder / f"{OWN}-ratios.csv"),
                  "--runs", str(folder / f"{OWN}-runs.csv"), "--environment", str(folder / f"{OWN}-environment.csv"),
                  "--replication", str(folder / "replication.csv"), "--figures", str(tmp_path / "figures"),
                  "--frameworks", *FRAMEWORKS, "--overview", str(folder / "findings-overview.csv"), "--out", str(out),
                  check=True)
    assert "on the same data" not in out.read_text()
    assert set(pd.read_csv(folder / "findings-overview.csv")["run_set"]) == {OWN}
