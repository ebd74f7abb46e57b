"""The matrix-product study: a peak per precision the run's workloads train in, and each training
point's utilisation against the peak of the precision it computed in (its measured precision,
dlbench.precision), not the one it asked for."""
import json
import subprocess

import pandas as pd
import pytest

from conftest import REPO, report_python, venv_python
from dlbench import precision
from dlbench.errors import ConfigError
from dlbench.frameworks import FRAMEWORKS
from dlbench.specs import spec_to_dict
from dlbench.studies.matmul import definition
from specs import smoke_spec

PLOT = REPO / "src/dlbench/studies/matmul/scripts/plot.py"
GIGA = 1e9


def config(matmul_precisions="auto", **workloads):
    return {"workloads": list(workloads), **{name: {"precisions": p} for name, p in workloads.items()},
            "matmul": {"sizes": [64], "precisions": matmul_precisions}}


def test_the_peak_is_measured_in_every_precision_a_workload_trains_in():
    both = config(mnist=["float32"], chestxray=["mixed-bfloat16", "float32"])
    assert definition.precisions(both) == ["float32", "mixed-bfloat16"]
    assert definition.precisions(config(mnist=["mixed-bfloat16"])) == ["float32", "mixed-bfloat16"]  # float32 always
    assert definition.precisions(config(mnist=["float32"])) == ["float32"]
    assert definition.precisions(config(["mixed-float16", "float32"], mnist=["float32"])) == ["float32", "mixed-float16"]
    rows = definition.runs(both, ["pytorch", "keras-jax", "chainer"], 2)
    # not Keras' (its product is its backend's); Chainer's bfloat16 rows are not applicable when they run
    assert len(rows) == 2 * 2 * 2 and {r["precision"] for r in rows} == {"float32", "mixed-bfloat16"}
    with pytest.raises(ConfigError, match="leaves out float32"):
        definition.check(config(["mixed-bfloat16"], mnist=["float32"]))


def product(framework, policy, measured, gflop_s, followed=True):
    """A matmul point and its run: `gflop_s` at size 64 (2 * 64^3 FLOPs a product)."""
    flops = 2 * 64 ** 3
    point = {"run_set": "matmul", "framework": framework, "size": 64, "precision": policy, "repeats": 3,
             "mean": gflop_s * GIGA / flops, "ci_low": 0.9 * gflop_s * GIGA / flops,
             "ci_high": 1.1 * gflop_s * GIGA / flops, "unstable": False, "below_minimum": False, "contended": False}
    run = {"run_set": "matmul", "framework": framework, "size": 64, "precision": policy, "status": "ok",
           "sample_flops": flops, "precision_measured": measured, "precision_followed": followed}
    return point, run


def training(framework, policy, measured, gflop_s):
    """A training point of 1 GFLOP a sample that ran at `gflop_s`, its run's measured precision `measured`."""
    point = {"run_set": "chestxray", "framework": framework, "batch": 8, "precision": policy, "repeats": 3,
             "mean": gflop_s, "ci_low": 0.9 * gflop_s, "ci_high": 1.1 * gflop_s, "unstable": False,
             "below_minimum": False, "contended": False}
    run = {"run_set": "chestxray", "framework": framework, "batch": 8, "precision": policy, "status": "ok",
           "sample_flops": GIGA, "precision_measured": measured, "precision_followed": policy == measured}
    return point, run


def mfu_table(tmp_path, products, trainings):
    tables = {}
    for name, rows in (("matmul", products), ("chestxray", trainings)):
        for kind, index in (("points", 0), ("runs", 1)):
            path = tmp_path / f"{name}-{kind}.csv"
            pd.DataFrame([r[index] for r in rows]).to_csv(path, index=False)
            tables[name, kind] = str(path)
    out = tmp_path / "matmul-mfu.csv"
    report_python(str(PLOT), "--runs", tables["matmul", "runs"], "--points", tables["matmul", "points"],
               "--counted-runs", tables["chestxray", "runs"], "--counted-points", tables["chestxray", "points"],
               "--outdir", str(tmp_path / "figures"), "--table", str(out), check=True, capture_output=True)
    return pd.read_csv(out).set_index("framework")


def test_each_training_point_is_held_against_the_peak_of_the_precision_it_computed_in(tmp_path):
    """PyTorch's bfloat16 product (1,000 GFLOP/s) is bfloat16's peak, TensorFlow's float32 (400)
    float32's; JAX's "bfloat16" product that XLA computed in float32 (not followed) sets neither, though
    it is the fastest of them. A bfloat16 training point is held against bfloat16's peak; JAX's
    "bfloat16" point, computed in float32, against float32's: the measured precision, not the asked one."""
    products = [product("pytorch", "float32", "float32", 350), product("tensorflow", "float32", "float32", 400),
                product("pytorch", "mixed-bfloat16", "mixed-bfloat16", 1000),
                product("jax", "mixed-bfloat16", "float32", 2000, followed=False)]
    trainings = [training("pytorch", "mixed-bfloat16", "mixed-bfloat16", 150),
                 training("jax", "mixed-bfloat16", "float32", 100), training("mxnet", "float32", "float32", 200)]
    mfu = mfu_table(tmp_path, products, trainings)
    pt, jax, mx = mfu.loc["pytorch"], mfu.loc["jax"], mfu.loc["mxnet"]
    assert pt["peak_precision"] == "mixed-bfloat16" and pt["peak_framework"] == "pytorch"
    assert pt["peak_flop_s"] == pytest.approx(1000 * GIGA) and pt["mfu"] == pytest.approx(0.15)
    assert jax["precision_measured"] == "float32" and jax["peak_precision"] == "float32"
    assert jax["peak_framework"] == "tensorflow" and jax["mfu"] == pytest.approx(0.25)
    assert mx["mfu"] == pytest.approx(0.5) and mx["mfu_low"] == pytest.approx(0.45)
    assert (tmp_path / "figures" / "mfu.png").stat().st_size > 0


def test_a_precision_without_its_peak_has_no_utilisation_rather_than_another_ones(tmp_path):
    """No bfloat16 product ran (e.g. every framework's failed): the bfloat16 point has no utilisation,
    never one against float32's peak; the float32 point keeps its own."""
    mfu = mfu_table(tmp_path, [product("pytorch", "float32", "float32", 400)],
                    [training("pytorch", "mixed-bfloat16", "mixed-bfloat16", 150),
                     training("mxnet", "float32", "float32", 200)])
    assert pd.isna(mfu.loc["pytorch", "mfu"]) and pd.isna(mfu.loc["pytorch", "peak_flop_s"])
    assert mfu.loc["mxnet", "mfu"] == pytest.approx(0.5) and mfu.loc["mxnet", "peak_precision"] == "float32"


@pytest.mark.slow
@pytest.mark.parametrize("framework", [name for name, spec in FRAMEWORKS.items() if not spec.engine])
def test_each_framework_s_product_proves_the_precision_it_computed_in(framework, tmp_path):
    """The smoke preset's product (size 128) through the protocol: float32 runs and its record says
    float32, followed; mixed-bfloat16 runs where the CPU has bfloat16 arithmetic (its record saying
    what the product computed in: bfloat16, or float32 where XLA's CPU backend converts it) and is not
    applicable where it has none, or in Chainer (no bfloat16)."""
    no_bfloat16 = precision.hardware_reason("mixed-bfloat16", "cpu")
    for policy in ("float32", "mixed-bfloat16"):
        spec = smoke_spec("matmul", framework, precision=policy)
        (tmp_path / "spec.json").write_text(json.dumps(spec_to_dict(spec)))
        proc = subprocess.run([venv_python(framework), "-m", "dlbench.protocol", str(tmp_path / "spec.json"),
                               str(tmp_path / f"{policy}.json")], cwd=tmp_path, capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        record = json.loads((tmp_path / f"{policy}.json").read_text())
        if policy == "float32":
            assert record["status"] == "ok", record.get("error")
            assert record["precision"]["measured"] == "float32" and record["precision"]["followed"], record["precision"]
            assert record["precision"]["forward_flops"] == 2 * 128 ** 3
        elif framework == "chainer" or no_bfloat16:
            assert record["status"] == "not_applicable", record
            assert "bfloat16" in record["reason"]
        else:
            assert record["status"] == "ok", record.get("error")
            assert record["precision"]["measured"] in ("mixed-bfloat16", "float32"), record["precision"]
