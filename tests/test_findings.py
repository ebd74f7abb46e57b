"""What this run found: the replication table's verdicts computed from tables, by their criteria,
and the summary the report opens with (tests/test_report_view.py looks at it in a browser)."""
import json
import re

import pandas as pd

from conftest import REPO, own_python, report_python

FINDINGS = REPO / "src/dlbench/studies/findings/scripts"
FRAMEWORKS = ["pytorch", "tensorflow", "mxnet"]


# the text dlbench.stats.ratios writes beside a comparison's data: frameworks in their default modes
MODES = {"pytorch": "eager", "tensorflow": "graph", "mxnet": "hybrid", "jax": "jit", "chainer": "eager"}
UNITS = {"devices": " devices", "input": " input"}


def ratio_row(compared, numerator, denominator, ratio, low, high, framework=None, mode=None, devices=1, strategy=None,
              model="small", run_set="mnist"):
    """A ratios row: `compared` (framework, or the point key that changes) from `numerator` over
    `denominator`, with its text as dlbench.stats.ratios writes it (the findings read the data)."""
    comparison = (f"{numerator} ({MODES[numerator]}) / {denominator} ({MODES[denominator]})" if compared == "framework"
                  else f"{numerator} / {denominator}{UNITS.get(compared, '')}" + (f" ({strategy})" if strategy else ""))
    return {"run_set": run_set, "comparison": comparison, "compared": compared, "numerator": numerator,
            "denominator": denominator, "framework": framework, "batch": 64, "devices": devices, "strategy": strategy,
            "mode": mode, "model": model, "ratio": ratio, "ci_low": low, "ci_high": high, "verdict": "",
            "unstable": False, "below_minimum": False, "contended": False}


def memory_ratio(compared, numerator, denominator, num_mib, den_mib, low, high, framework="", repeats=3,
                 workload="mnist", batch=64):
    """A memory-ratios row (the memory study's scripts/plot.py): numerator / denominator peak RSS."""
    ratio = num_mib / den_mib
    return {"workload": workload, "comparison": f"{numerator} / {denominator}", "compared": compared,
            "numerator": numerator, "denominator": denominator, "framework": framework, "mode": None, "batch": batch,
            "numerator_mib": num_mib, "denominator_mib": den_mib, "repeats_numerator": repeats,
            "repeats_denominator": repeats, "ratio": ratio, "ci_low": low, "ci_high": high, "verdict": ""}


def epoch_rows(framework, mode, first_seconds, second=2.0):
    """mnist-convergence rows of one framework: a process per first epoch time, its second `second`."""
    return [{"framework": framework, "run_id": f"{framework}-{repeat}", "devices": 1, "mode": mode, "status": "ok",
             "segment": segment, "wall_s": wall}
            for repeat, first in enumerate(first_seconds, 1) for segment, wall in ((1, first), (2, second))]


def replication(tables, tmp_path, workloads, frameworks=FRAMEWORKS, synthetic=True, studies=()):
    folder = tmp_path / "tables"
    folder.mkdir(exist_ok=True)
    for name, frame in tables.items():
        pd.DataFrame(frame).to_csv(folder / f"{name}.csv", index=False)
    out = tmp_path / "replication.csv"
    own_python(str(FINDINGS / "replication.py"), "--tables-dir", str(folder),
               "--workloads", *workloads, "--studies", *studies, "--frameworks", *frameworks, *(["--synthetic-images"] * synthetic),
               "--out", str(out), check=True, capture_output=True)
    return pd.read_csv(out).set_index("claim")


def test_a_claim_holds_fails_or_is_not_resolved_by_its_intervals(tmp_path):
    """TensorFlow / PyTorch above 1 everywhere: holds, whichever way the ratio was taken; MXNet /
    PyTorch below 1 at one point: does not hold; a compiled mode whose interval spans 1: not resolved."""
    ratios = [ratio_row("framework", "tensorflow", "pytorch", 1.5, 1.2, 1.8),
              ratio_row("framework", "pytorch", "tensorflow", 0.5, 0.4, 0.6, devices=2),  # tf / pt 2.0 [1.67, 2.5]
              ratio_row("mode", "compile", "eager", 1.1, 0.9, 1.3, framework="pytorch"),
              ratio_row("mode", "graph", "eager", 2.0, 1.6, 2.5, framework="tensorflow"),
              ratio_row("mode", "graph", "eager", 3.0, 2.4, 3.7, framework="tensorflow", devices=2, strategy="mirrored"),
              ratio_row("devices", 2, 1, 1.3, 1.1, 1.5, framework="tensorflow", mode="graph", devices=None,
                        strategy="mirrored")]
    imdb = [ratio_row("framework", "mxnet", "pytorch", 1.2, 1.05, 1.4, run_set="imdb"),
            ratio_row("framework", "mxnet", "pytorch", 0.8, 0.7, 0.9, run_set="imdb", devices=2)]
    claims = replication({"mnist-ratios": ratios, "imdb-ratios": imdb}, tmp_path, ["mnist", "imdb"])
    tf = claims.loc["TensorFlow processes more images per second than PyTorch"]
    assert tf["verdict"] == "holds" and "2.00x [1.67, 2.50]" in tf["figures"] and tf["source"] == "mnist-ratios.csv"
    assert "lies above 1" in tf["criterion"]
    assert claims.loc["MXNet trains the LSTM faster than PyTorch", "verdict"] == "does not hold"
    graphs = claims.loc["Graphs (compiled modes) train faster than imperative code"]
    assert graphs["verdict"] == "not resolved at these repeats"
    assert "pytorch compile / eager (mnist): 1.10x [0.90, 1.30]" in graphs["figures"]
    # a framework's two points each named by what differs between them
    assert "tensorflow graph / eager (mnist devices=1): 2.00x" in graphs["figures"]
    assert "tensorflow graph / eager (mnist devices=2 strategy=mirrored): 3.00x" in graphs["figures"]
    devices = claims.loc["TensorFlow gains by treating each CPU core as a device"]
    assert devices["verdict"] == "holds" and "1.30x [1.10, 1.50]" in devices["figures"]
    # the small model gains from 2 devices here: the study's "does not scale" does not hold
    assert claims.loc["The small model does not gain from more devices", "verdict"] == "does not hold"


def test_scaling_and_input_claims_read_what_a_ratio_compares_from_its_columns(tmp_path):
    """TensorFlow's N / 1 devices (MirroredStrategy) against PyTorch DataParallel's (strategy dp) on
    the same devices at the same point; synthetic over real input (the text reads "synthetic / real
    input": the claims select by the columns compared, numerator and denominator, not by it)."""
    mnist = [ratio_row("devices", 2, 1, ratio, low, high, framework=framework, mode=mode, devices=None,
                       strategy=strategy, model=model)
             for model in ("small", "large")
             for framework, mode, strategy, ratio, low, high in (("tensorflow", "graph", "mirrored", 1.6, 1.5, 1.7),
                                                                 ("pytorch", "eager", "dp", 1.2, 1.1, 1.3),
                                                                 ("pytorch", "eager", "ddp", 1.9, 1.8, 2.0))]
    chestxray = [ratio_row("input", "synthetic", "real", 1.5, 1.4, 1.6, framework=f, run_set="chestxray")
                 for f in ("pytorch", "tensorflow")]
    claims = replication({"mnist-ratios": mnist, "chestxray-ratios": chestxray}, tmp_path, ["mnist", "chestxray"])
    scales = claims.loc["TensorFlow scales up better than PyTorch DataParallel"]
    assert scales["verdict"] == "holds"
    assert "model=small batch=64 2 / 1 devices: TensorFlow 1.60x [1.50, 1.70], PyTorch 1.20x [1.10, 1.30]" in \
        scales["figures"] and "model=large" in scales["figures"] and "1.90x" not in scales["figures"]
    real = claims.loc["Training from real image files is slower than from synthetic tensors"]
    assert real["verdict"] == "holds" and real["figures"] == "pytorch: 1.50x [1.40, 1.60]; tensorflow: 1.50x [1.40, 1.60]"


def test_a_claim_without_its_measurement_says_what_would_measure_it(tmp_path):
    claims = replication({}, tmp_path, ["mnist"], synthetic=True)
    assert set(claims["verdict"]) == {"not measured here"}
    assert len(claims) == 16 and set(claims["study"]) == {
        "IMDB LSTM (Borealis AI)", "multi-GPU DenseNet-121 (ilkarman)", "MNIST data-parallel (r-o-s-h-a-n)",
        "TensorFlow vs MXNet survey"}
    assert "GPUs only" in claims.loc["TensorFlow scales up better than PyTorch DataParallel", "figures"]
    assert "synthetic images" in claims.loc["Every framework reaches a similar test AUC", "figures"]
    assert "(studies memory)" in claims.loc["MXNet uses less memory than TensorFlow", "figures"]


def test_memory_epoch_onnx_and_code_claims_read_their_tables(tmp_path):
    # MXNet / TensorFlow below 1 (listed either way round); TensorFlow's graph over eager below 1, MXNet's
    # hybrid over imperative above 1: graphs do not use less
    ratios = [memory_ratio("framework", "mxnet", "tensorflow", 300, 700, 0.40, 0.46),
              memory_ratio("framework", "tensorflow", "mxnet", 737, 396, 1.7, 2.0, workload="imdb"),
              memory_ratio("mode", "eager", "graph", 767, 737, 1.01, 1.07, framework="tensorflow"),
              memory_ratio("mode", "imperative", "hybrid", 250, 300, 0.80, 0.88, framework="mxnet")]
    # 3 processes each, the first epoch longer in each: an interval above 1
    convergence = epoch_rows("pytorch", "eager", (4.0, 4.4, 4.2)) + epoch_rows("mxnet", "hybrid", (3.0, 3.2, 3.1))
    # a repeat past the convergence repeats: one row with its status and no segment
    convergence += [{"framework": f, "run_id": f"{f}-4", "devices": 1, "mode": mode, "status": "ok", "segment": None,
                     "wall_s": None} for f, mode in (("pytorch", "eager"), ("mxnet", "hybrid"))]
    runtimes = [{"model": "mnist-small", "runtime": "mxnet", "ok": 3, "not_ok": None, "class_agreement": 1.0,
                 "max_abs_difference": 1e-6},
                {"model": "imdb-lstm", "runtime": "mxnet", "ok": 0, "not_ok": "no translation of ConstantOfShape",
                 "class_agreement": None, "max_abs_difference": None}]
    lines = [{"run_set": "imdb", "framework": f, "code_lines": n} for f, n in
             (("pytorch", 90), ("tensorflow", 80), ("mxnet", 120))]
    claims = replication({"memory-ratios": ratios, "mnist-convergence": convergence, "onnx-runtimes": runtimes,
                          "findings-code-lines": lines}, tmp_path, ["mnist", "imdb"],
                         studies=["onnx", "memory", "findings"])
    mxnet = claims.loc["MXNet uses less memory than TensorFlow"]
    assert mxnet["verdict"] == "holds" and mxnet["source"] == "memory-ratios.csv"
    assert "mnist batch 64: MXNet 300 / TensorFlow 700 MiB: 0.43x [0.40, 0.46] (3 / 3 processes)" in mxnet["figures"]
    assert "imdb batch 64: MXNet 396 / TensorFlow 737 MiB: 0.54x [0.50, 0.59]" in mxnet["figures"]  # turned round
    graphs = claims.loc["Graphs (compiled modes) use less memory than imperative code"]
    assert graphs["verdict"] == "does not hold"
    assert "tensorflow (mnist batch 64): graph 737 / eager 767 MiB: 0.96x [0.93, 0.99]" in graphs["figures"]
    assert "mxnet (mnist batch 64): hybrid 300 / imperative 250 MiB: 1.20x [1.14, 1.25]" in graphs["figures"]
    epoch = claims.loc["The first epoch is slower than the second"]
    assert epoch["verdict"] == "holds", epoch["figures"]
    assert re.search(r"pytorch 2\.10x \[\d\.\d\d, \d\.\d\d\] \(3 repeats\)", epoch["figures"])
    assert "each a cold process" in epoch["criterion"] and "lies above 1" in epoch["criterion"]
    onnx = claims.loc["A model moves from PyTorch to MXNet through ONNX"]
    assert onnx["verdict"] == "does not hold" and "ConstantOfShape" in onnx["figures"]
    code = claims.loc["PyTorch is quicker to write (and debug)"]
    assert code["verdict"] == "does not hold" and "tensorflow 80" in code["figures"]
    assert "not measured" in code["criterion"]  # lines of code, not the time to write or debug


def test_the_first_epoch_claim_reads_the_interval_over_processes(tmp_path):
    """A first / second ratio near 1 whose processes spread across it: not resolved, with an interval
    that shows why; one whose interval lies below 1: a counter-example."""
    spread = epoch_rows("pytorch", "eager", (1.7, 2.5, 2.1))
    claims = replication({"mnist-convergence": spread}, tmp_path, ["mnist"])
    epoch = claims.loc["The first epoch is slower than the second"]
    assert epoch["verdict"] == "not resolved at these repeats"
    low, high = map(float, re.search(r"pytorch 1\.05x \[(\d\.\d\d), (\d\.\d\d)\]", epoch["figures"]).groups())
    assert low < 1 < high
    faster = epoch_rows("pytorch", "eager", (1.5, 1.52, 1.48)) + epoch_rows("mxnet", "hybrid", (4.0, 4.1, 3.9))
    assert replication({"mnist-convergence": faster}, tmp_path, ["mnist"]).loc[
        "The first epoch is slower than the second", "verdict"] == "does not hold"


def test_pytorch_s_sparse_over_dense_gradients_answers_the_imdb_study(tmp_path):
    imdb = [ratio_row("grad", "sparse", "dense", 1.3, 1.2, 1.4, framework="pytorch", mode="eager", run_set="imdb"),
            ratio_row("framework", "mxnet", "pytorch", 1.2, 1.05, 1.4, run_set="imdb")]
    sparse = replication({"imdb-ratios": imdb}, tmp_path, ["imdb"]).loc[
        "PyTorch's sparse embedding gradients train faster than dense ones"]
    assert sparse["verdict"] == "holds" and sparse["source"] == "imdb-ratios.csv"
    assert "1.30x [1.20, 1.40]" in sparse["figures"] and "grad=" not in sparse["figures"]
    imdb[0] = ratio_row("grad", "sparse", "dense", 1.02, 0.95, 1.1, framework="pytorch", mode="eager", run_set="imdb")
    assert replication({"imdb-ratios": imdb}, tmp_path, ["imdb"]).loc[
        "PyTorch's sparse embedding gradients train faster than dense ones", "verdict"] == "not resolved at these repeats"
    # dense gradients only: the study's question is not asked
    dense = replication({"imdb-ratios": imdb[1:]}, tmp_path, ["imdb"]).loc[
        "PyTorch's sparse embedding gradients train faster than dense ones"]
    assert dense["verdict"] == "not measured here" and "imdb.grads" in dense["figures"]


def test_a_memory_or_epoch_claim_on_one_repeat_a_side_is_not_resolved(tmp_path):
    """One process is one sample: a memory pass of one repeat a point (memory.repeats: 1) and one
    repeat with convergence epochs decide no claim, however far apart their figures are (issue 53: two
    runs of one commit gave the first-epoch claim both ways)."""
    ratios = [memory_ratio("framework", "mxnet", "tensorflow", 300, 700, None, None, repeats=1)]
    convergence = epoch_rows("pytorch", "eager", (9.0,))
    claims = replication({"memory-ratios": ratios, "mnist-convergence": convergence}, tmp_path, ["mnist"],
                         studies=["memory"])
    for claim in ("MXNet uses less memory than TensorFlow", "The first epoch is slower than the second"):
        assert claims.loc[claim, "verdict"] == "not resolved at these repeats"
        assert "one sample" in claims.loc[claim, "criterion"]
    assert "pytorch 4.50x (1 repeat: no interval)" in claims.loc["The first epoch is slower than the second", "figures"]
    assert "0.43x (1 / 1 processes)" in claims.loc["MXNet uses less memory than TensorFlow", "figures"]


def points_row(framework, mode, mean, low, high, devices=1):
    return {"run_set": "mnist", "framework": framework, "batch": 64, "devices": devices, "mode": mode, "repeats": 3,
            "units": 9, "steps": 90, "mean": mean, "ci_low": low, "ci_high": high, "median": mean, "q25": mean,
            "q75": mean, "iqr": 0, "cv_within": 0.01, "cv_between": 0.01, "unstable": False, "below_minimum": False,
            "contended": False}


def run_summary(tmp_path, points, ratios, runs=({"numerics": "flush"},), frameworks=FRAMEWORKS):
    tables = tmp_path / "tables"
    tables.mkdir()
    pd.DataFrame(points).to_csv(tables / "mnist-points.csv", index=False)
    pd.DataFrame(ratios).to_csv(tables / "mnist-ratios.csv", index=False)
    pd.DataFrame(list(runs)).to_csv(tables / "mnist-runs.csv", index=False)
    pd.DataFrame([{"framework": f, "framework_version": "1.0", "library": None, "library_version": None,
                   "cpu": "TestCPU family 1", "cpu_flags": "avx avx2", "cpu_count": 2, "gpus": "none",
                   "git_commit": "abcdef1234567"} for f in FRAMEWORKS]).to_csv(tables / "mnist-environment.csv", index=False)
    claims = replication({}, tmp_path, ["mnist"])
    claims.reset_index().to_csv(tables / "replication.csv", index=False)
    out = tmp_path / "summary.html"
    report_python(str(FINDINGS / "summary.py"), "--sets", "mnist", "--samples", "images",
                  "--points", str(tables / "mnist-points.csv"), "--ratios", str(tables / "mnist-ratios.csv"),
                  "--runs", str(tables / "mnist-runs.csv"), "--environment", str(tables / "mnist-environment.csv"),
                  "--replication", str(tables / "replication.csv"), "--figures", str(tmp_path / "figures"),
                  "--frameworks", *frameworks, "--overview", str(tables / "findings-overview.csv"),
                  "--out", str(out), check=True)
    return out.read_text()


def test_the_first_view_opens_on_every_framework_against_every_run_set_with_its_interval_and_why_not(tmp_path):
    points = [points_row("pytorch", "eager", 100, 90, 110), points_row("tensorflow", "graph", 300, 250, 350),
              {**points_row("mxnet", "hybrid", 280, 240, 320), "unstable": True}]
    ratios = [ratio_row("framework", "tensorflow", "pytorch", 3.0, 2.5, 3.5),
              ratio_row("framework", "mxnet", "pytorch", 2.8, 2.3, 3.3),
              flagged(ratio_row("framework", "mxnet", "tensorflow", 0.93, 0.8, 1.1), unstable=True)]
    runs = [{"framework": "chainer", "batch": 64, "devices": 1, "status": "not_applicable", "numerics": "flush"},
            {"framework": "jax", "batch": 64, "devices": 1, "status": "failed", "numerics": "flush"}]
    frameworks = [*FRAMEWORKS, "chainer", "jax", "keras-jax"]
    page = run_summary(tmp_path, points, ratios, runs, frameworks)
    table = pd.read_csv(tmp_path / "tables" / "findings-overview.csv").set_index("framework")
    assert list(table.index) == frameworks and set(table["run_set"]) == {"mnist"}
    assert table.loc["tensorflow", "ratio_to_fastest"] == 1.0 and table.loc["tensorflow", "samples_per_s"] == 300
    pytorch = table.loc["pytorch"]
    assert (round(pytorch["ratio_to_fastest"], 3), round(pytorch["ci_low"], 3), round(pytorch["ci_high"], 3)) == (
        0.333, 0.286, 0.4)
    assert table.loc["mxnet", "flags"] == "unstable" and table.loc["mxnet", "ci_high"] > 1
    assert table.loc["chainer", "status"] == "not applicable" and table.loc["jax", "status"] == "failed"
    assert table.loc["keras-jax", "status"] == "not in this run set"
    # the figure comes first, above the machine and the prose
    assert page.index("Every framework on every run set") < page.index("<b>CPU</b>") < page.index("The fastest at each")
    assert (tmp_path / "figures" / "overview.png").stat().st_size > 10_000


def test_the_first_view_says_what_bfloat16_buys_framework_by_framework_and_why_one_has_none(tmp_path):
    points = [{**points_row(framework, mode, mean, mean * 0.9, mean * 1.1), "precision": policy}
              for framework, mode in (("pytorch", "eager"), ("tensorflow", "graph"))
              for policy, mean in (("float32", 100), ("mixed-bfloat16", 150))]
    ratios = [{**ratio_row("precision", "mixed-bfloat16", "float32", 1.46, 1.40, 1.52, framework="pytorch"),
               "precision": None},
              {**flagged(ratio_row("precision", "mixed-bfloat16", "float32", 1.02, 0.95, 1.09, framework="tensorflow"),
                         precision_not_followed=True), "precision": None},
              *({**ratio_row("framework", "tensorflow", "pytorch", 1.0, 0.9, 1.1), "precision": policy}
                for policy in ("float32", "mixed-bfloat16"))]
    runs = [{"framework": "pytorch", "batch": 64, "devices": 1, "precision": "mixed-bfloat16", "status": "ok",
             "numerics": "flush", "precision_share_16bit": 0.998, "error": None},
            {"framework": "tensorflow", "batch": 64, "devices": 1, "precision": "mixed-bfloat16", "status": "ok",
             "numerics": "flush", "precision_share_16bit": 0.0, "error": None},
            {"framework": "chainer", "batch": 64, "devices": 1, "precision": "mixed-bfloat16", "status": "not_applicable",
             "numerics": "flush", "precision_share_16bit": None, "error": "Chainer 7 has no bfloat16"}]
    page = run_summary(tmp_path, points, ratios, runs, ["pytorch", "tensorflow", "chainer"])
    line = re.search(r"<p><b>bfloat16 over float32 on this machine</b>.*?</p>", page).group(0)
    assert "pytorch 1.46 [1.40, 1.52] (mnist, 99.8% of its FLOPs in bfloat16)" in line
    assert re.search(r"tensorflow 1.02 \[0.95, 1.09\]<sup [^>]*>\[precision not followed\]</sup> "
                     r"\(mnist, 0% of its FLOPs in bfloat16\)", line), line
    assert "chainer: not applicable (Chainer 7 has no bfloat16)" in line
    # the first view's order: the machine, then the precision line, then the fastest at each point
    assert page.index("<b>CPU</b>") < page.index("bfloat16 over float32") < page.index("The fastest at each")


def test_the_summary_names_the_fastest_its_interval_and_those_it_is_not_separated_from(tmp_path):
    points = [points_row("pytorch", "eager", 100, 90, 110), points_row("tensorflow", "graph", 300, 250, 350),
              points_row("mxnet", "hybrid", 280, 240, 320), points_row("mxnet", "imperative", 900, 800, 1000)]
    ratios = [ratio_row("framework", "tensorflow", "pytorch", 3.0, 2.5, 3.5),
              ratio_row("framework", "mxnet", "pytorch", 2.8, 2.3, 3.3),
              ratio_row("framework", "mxnet", "tensorflow", 0.93, 0.8, 1.1)]
    page = run_summary(tmp_path, points, ratios)
    # MXNet's imperative mode is faster here, but frameworks are compared in their default modes
    assert "fastest tensorflow, 300 [250, 350] images/s" in page
    assert "not resolved</em> against mxnet 0.93 [0.80, 1.10]" in page  # its ratio to the fastest
    assert "ahead of pytorch 0.33 [0.29, 0.40]" in page
    assert "TestCPU family 1" in page and "pytorch 1.0" in page and "flush" in page and "abcdef1234" in page
    assert "The studies' 16 claims</b>" in page and "15 not measured here, 1 holds" in page  # counted, first
    assert (tmp_path / "figures" / "ratios-mnist.png").stat().st_size > 0
    assert re.search(r'<img src="data:image/png;base64,[A-Za-z0-9+/=]{100,}"', page)
    assert "showResultInfo('results/figures/onnx/runtimes.png')" not in page  # not measured: no figure to link


def test_frameworks_whose_repeats_stopped_for_different_reasons_are_one_point(tmp_path):
    """The points table says why each row's repeats stopped (resolved, budget, max_repeats): the
    first view still compares every framework of the point in one sentence."""
    points = [{**points_row("pytorch", "eager", 100, 90, 110), "stopped": "resolved"},
              {**points_row("tensorflow", "graph", 300, 250, 350), "stopped": "budget"}]
    page = run_summary(tmp_path, points, [ratio_row("framework", "tensorflow", "pytorch", 3.0, 2.5, 3.5)])
    assert "fastest tensorflow, 300 [250, 350] images/s" in page and "ahead of pytorch 0.33 [0.29, 0.40]" in page
    assert "stopped=" not in page


def test_one_repeat_is_said_to_have_no_interval(tmp_path):
    nan = float("nan")
    points = [points_row("pytorch", "eager", 100, nan, nan), points_row("tensorflow", "graph", 300, nan, nan)]
    page = run_summary(tmp_path, points, [ratio_row("framework", "tensorflow", "pytorch", 3.0, nan, nan)])
    assert "fastest tensorflow, 300 (one repeat: no interval) images/s" in page
    assert "pytorch 0.33 (one repeat: no interval)" in page


def flagged(row, **flags):
    return {**row, **flags}


def test_a_verdict_resting_on_a_contended_or_short_unit_ratio_is_not_resolved(tmp_path):
    """The flag rule (replication.FLAG_RULE): a contended or short-unit ratio decides nothing; an
    unstable one still does; every figure from a flagged ratio names its flags."""
    mnist = [ratio_row("framework", "tensorflow", "pytorch", 1.5, 1.2, 1.8),
             flagged(ratio_row("framework", "tensorflow", "pytorch", 2.0, 1.6, 2.5, devices=2), contended=True),
             flagged(ratio_row("mode", "graph", "eager", 2.0, 1.6, 2.5, framework="tensorflow"), unstable=True),
             ratio_row("devices", 2, 1, 1.3, 1.1, 1.5, framework="tensorflow", mode="graph", devices=None,
                       strategy="mirrored"),
             flagged(ratio_row("devices", 2, 1, 1.2, 1.05, 1.4, framework="tensorflow", mode="graph",
                               devices=None, strategy="mirrored", model="large"), below_minimum=True, contended=True)]
    # a clean counter-example stands beside a flagged one (imdb); a flagged one alone does not (chestxray)
    imdb = [ratio_row("framework", "mxnet", "pytorch", 0.8, 0.7, 0.9, run_set="imdb"),
            flagged(ratio_row("framework", "mxnet", "pytorch", 0.7, 0.6, 0.8, run_set="imdb", devices=2),
                    contended=True)]
    chestxray = [flagged(ratio_row("input", "synthetic", "real", 0.8, 0.7, 0.9, framework="pytorch",
                                   run_set="chestxray"), contended=True),
                 ratio_row("input", "synthetic", "real", 1.2, 1.1, 1.3, framework="tensorflow", run_set="chestxray")]
    loaders = [{"loader": "pytorch loader", "format": "jpeg", "workers": 0, "images_per_s": 5.0, "ci_low": 4.0,
                "ci_high": 6.0, "unstable": False, "below_minimum": True, "contended": False,
                "trainer_images_per_s": 10.0, "keeps_trainer_fed": False},
               {"loader": "pytorch loader", "format": "jpeg", "workers": 2, "images_per_s": 20.0, "ci_low": 15.0,
                "ci_high": 25.0, "unstable": False, "below_minimum": False, "contended": False,
                "trainer_images_per_s": 10.0, "keeps_trainer_fed": True}]
    claims = replication({"mnist-ratios": mnist, "imdb-ratios": imdb, "chestxray-ratios": chestxray,
                          "chestxray-loader-verdict": loaders}, tmp_path, ["mnist", "imdb", "chestxray"])
    tf = claims.loc["TensorFlow processes more images per second than PyTorch"]
    assert tf["verdict"] == "not resolved at these repeats"  # it would hold on every interval
    assert "2.00x [1.60, 2.50] (contended)" in tf["figures"] and "1.50x [1.20, 1.80];" in tf["figures"]
    assert "contended or has short units counts as not resolved" in tf["criterion"]
    graphs = claims.loc["Graphs (compiled modes) train faster than imperative code"]
    assert graphs["verdict"] == "holds" and "2.00x [1.60, 2.50] (unstable)" in graphs["figures"]
    assert claims.loc["MXNet trains the LSTM faster than PyTorch", "verdict"] == "does not hold"
    real = claims.loc["Training from real image files is slower than from synthetic tensors"]
    assert real["verdict"] == "not resolved at these repeats" and "pytorch: 0.80x [0.70, 0.90] (contended)" in real["figures"]
    devices = claims.loc["TensorFlow gains by treating each CPU core as a device"]
    assert devices["verdict"] == "not resolved at these repeats"
    assert "1.20x [1.05, 1.40] (short units, contended)" in devices["figures"]
    small = claims.loc["The small model does not gain from more devices"]  # a clean gain of the small model
    assert small["verdict"] == "does not hold"
    loader = claims.loc["The data loader is the bottleneck"]   # the one slow loader has short units
    assert loader["verdict"] == "not resolved at these repeats" and "images/s (short units)" in loader["figures"]


def test_the_summary_marks_every_number_from_a_flagged_point_or_ratio_and_says_what_the_marks_mean(tmp_path):
    points = [points_row("pytorch", "eager", 100, 90, 110),
              flagged(points_row("tensorflow", "graph", 300, 250, 350), contended=True),
              points_row("mxnet", "hybrid", 280, 240, 320)]
    ratios = [flagged(ratio_row("framework", "tensorflow", "pytorch", 3.0, 2.5, 3.5), contended=True),
              ratio_row("framework", "mxnet", "pytorch", 2.8, 2.3, 3.3),
              flagged(ratio_row("framework", "mxnet", "tensorflow", 0.93, 0.8, 1.1), unstable=True, contended=True)]
    page = run_summary(tmp_path, points, ratios)
    assert re.search(r"fastest tensorflow, 300 \[250, 350\]<sup[^>]*>\[contended\]</sup> images/s", page)
    assert re.search(r"against mxnet 0.93 \[0.80, 1.10\]<sup[^>]*>\[unstable, contended\]</sup>", page)
    assert re.search(r"ahead of pytorch 0.33 \[0.29, 0.40\]<sup[^>]*>\[contended\]</sup>", page)
    legend = re.search(r'<p class="flags">.*?</p>', page).group(0)
    assert "[contended]</sup> other processes used more than max_other_cpus" in legend
    assert "[unstable]</sup> its units or runs vary" in legend and "short units" not in legend  # only those shown
    (tmp_path / "clean").mkdir()
    clean = run_summary(tmp_path / "clean", [points_row("pytorch", "eager", 100, 90, 110),
                                             points_row("tensorflow", "graph", 300, 250, 350)],
                        [ratio_row("framework", "tensorflow", "pytorch", 3.0, 2.5, 3.5)])
    assert "<sup" not in clean and 'class="flags"' not in clean


# Runs in the report env (seaborn): draws the findings' forest plot and reports its marks and labels.
FOREST = """
import json, sys
import matplotlib.pyplot as plt
import pandas as pd
sys.path.insert(0, sys.argv[3])
import summary

drawn = []
plt.close = lambda fig: drawn.append(fig)   # keep the figure to look at it
summary.forest(pd.read_csv(sys.argv[1]), None, sys.argv[2], "mnist", "images")
fig = drawn[0]
ax = fig.axes[0]
print(json.dumps({"marks": [[bar.lines[0].get_marker(), str(bar.lines[0].get_markerfacecolor())] for bar in ax.containers],
                  "labels": [t.get_text() for t in ax.get_yticklabels()],
                  "legend": [t.get_text() for legend in fig.legends for t in legend.get_texts()]}))
"""


def test_the_forest_plot_marks_flagged_ratios_as_every_figure_does(tmp_path):
    """Hollow: unstable; a cross: contended or short units; the label names the flags."""
    ratios = [ratio_row("framework", "tensorflow", "pytorch", 3.0, 2.5, 3.5),
              flagged(ratio_row("framework", "mxnet", "pytorch", 2.8, 2.3, 3.3), unstable=True),
              flagged(ratio_row("framework", "jax", "pytorch", 2.0, 1.5, 2.5), contended=True),
              flagged(ratio_row("framework", "chainer", "pytorch", 0.5, 0.4, 0.6), below_minimum=True)]
    path = tmp_path / "ratios.csv"
    pd.DataFrame(ratios).to_csv(path, index=False)
    out = report_python("-c", FOREST, str(path), str(tmp_path / "forest.png"), str(FINDINGS),
                        capture_output=True, text=True, check=True).stdout
    drawn = json.loads(out)
    assert [mark for mark, _ in drawn["marks"]] == ["o", "o", "X", "X"]
    assert [face == "white" for _, face in drawn["marks"]] == [False, True, False, False]
    assert drawn["labels"][1:] == ["mxnet (unstable)", "jax (contended)", "chainer (short units)"]
    assert any(text.startswith("hollow: unstable") for text in drawn["legend"])
    assert any("cross: contended" in text and "cross: short units" in text for text in drawn["legend"])


# --- the studies' own figures beside this run's (studies.yaml), and the peak each precision is held against


def test_the_study_s_own_figure_stands_beside_this_run_s_naming_both_machines(tmp_path):
    """Each claim carries the study's published figure of its quantity with the study's hardware and
    versions, and this run's same quantity with its interval and this machine; where this run cannot
    measure it (GPUs, the NIH images) it says so beside the study's figure."""
    import yaml

    mnist = [ratio_row("framework", "tensorflow", "pytorch", 1.5, 1.2, 1.8)]
    imdb = [ratio_row("grad", "sparse", "dense", 1.3, 1.2, 1.4, framework="pytorch", mode="eager", run_set="imdb")]
    environment = [{"framework": "pytorch", "cpu": "TestCPU family 6 model 167", "cpu_count": 2, "gpus": "none"}]
    claims = replication({"mnist-ratios": mnist, "imdb-ratios": imdb, "mnist-environment": environment}, tmp_path,
                         ["mnist", "imdb", "chestxray"])
    assert claims["study_figure"].str.len().gt(0).all() and claims["study_hardware"].str.len().gt(0).all()
    assert (claims["this_run_hardware"] == "TestCPU family 6 model 167 (2 cores), no GPU").all()
    tf = claims.loc["TensorFlow processes more images per second than PyTorch"]
    assert "2.78x on 1 K80 (10.3 / 3.7 s)" in tf["study_figure"] and "Tesla K80" in tf["study_hardware"]
    assert "TensorFlow 2.0.0, PyTorch 1.2.0" in tf["study_hardware"] and "1.50x [1.20, 1.80]" in tf["this_run_figure"]
    devices = claims.loc["Training DenseNet-121 on N devices is faster than on 1"]
    assert "PyTorch 2.70x (27 / 10 min)" in devices["study_figure"]
    assert devices["this_run_figure"].startswith("not measured here: no GPU on this machine")
    auc = claims.loc["Every framework reaches a similar test AUC"]
    assert "0.8235" in auc["study_figure"] and "NIH" in auc["this_run_figure"]
    # the first epoch: the MNIST study's figure and the IMDB study's, each naming its own
    first = claims.loc["The first epoch is slower than the second"]
    assert "10.0x (37.1 / 3.7 s" in first["study_figure"] and "IMDB LSTM (Borealis AI): first / later" in first[
        "study_figure"] and "1.3-1.5x" in first["study_figure"]
    assert "no figure published" in claims.loc["MXNet uses less memory than TensorFlow", "study_figure"]
    # every figure of studies.yaml is of a study it names
    data = yaml.safe_load((FINDINGS.parent / "studies.yaml").read_text())
    assert all(entry["study"] in data["studies"] for entry in data["figures"])
    (tmp_path / "view").mkdir()
    page = run_summary(tmp_path / "view", [points_row("pytorch", "eager", 100, 90, 110)],
                       [ratio_row("framework", "tensorflow", "pytorch", 1.5, 1.2, 1.8)])
    assert "the study&#x27;s own figure beside this run&#x27;s" in page or "the study's own figure beside" in page
    assert "2.78x on 1 K80" in page and "TestCPU family 1 (2 cores), no GPU" in page


def test_a_claim_s_own_figures_stand_beside_the_study_s_where_they_are_its_quantity(tmp_path):
    """PyTorch's sparse / dense gradients: the study's 1.2-1.6x on a V100 beside the claim's own ratio
    with its interval (studies.yaml's `beside: claim`); a claim this run did not measure says why."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("replication", FINDINGS / "replication.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    (tmp_path / "tables").mkdir()
    claims = pd.DataFrame([
        {"study": module.IMDB_STUDY, "claim": "PyTorch's sparse embedding gradients train faster than dense ones",
         "verdict": "holds", "figures": "sparse / dense steady throughput: batch=64: 1.30x [1.20, 1.40]"},
        {"study": module.IMDB_STUDY, "claim": "MXNet trains the LSTM faster than PyTorch", "verdict": "not measured here",
         "figures": "workload imdb not configured"}], columns=module.COLUMNS)
    found = module.with_study_figures(claims, module.Tables(tmp_path / "tables", ["imdb"], ["pytorch"])).set_index(
        "claim")
    sparse = found.loc["PyTorch's sparse embedding gradients train faster than dense ones"]
    assert "1.2-1.6x (20-60% faster" in sparse["study_figure"] and "Tesla V100" in sparse["study_hardware"]
    assert sparse["this_run_figure"] == "sparse / dense steady throughput: batch=64: 1.30x [1.20, 1.40]"
    assert sparse["this_run_hardware"] == "this machine (no environment table)"
    mxnet = found.loc["MXNet trains the LSTM faster than PyTorch"]
    assert "0.9x without loader workers" in mxnet["study_figure"]
    assert mxnet["this_run_figure"] == "not measured here: workload imdb not configured"


def test_the_first_view_names_the_peak_each_precision_is_held_against(tmp_path):
    mfu = tmp_path / "matmul-mfu.csv"
    pd.DataFrame([
        {"run_set": "chestxray", "framework": "pytorch", "point": "batch=8 precision=mixed-bfloat16", "mfu": 0.15,
         "mfu_low": 0.13, "mfu_high": 0.17, "precision_measured": "mixed-bfloat16", "peak_precision": "mixed-bfloat16",
         "peak_flop_s": 1.0e12, "peak_framework": "pytorch"},
        {"run_set": "chestxray", "framework": "mxnet", "point": "batch=8 precision=float32", "mfu": 0.4,
         "mfu_low": 0.35, "mfu_high": 0.45, "precision_measured": "float32", "peak_precision": "float32",
         "peak_flop_s": 3.47e11, "peak_framework": "tensorflow"}]).to_csv(mfu, index=False)
    tables = tmp_path / "tables"
    tables.mkdir()
    pd.DataFrame([points_row("pytorch", "eager", 100, 90, 110)]).to_csv(tables / "mnist-points.csv", index=False)
    pd.DataFrame([ratio_row("framework", "tensorflow", "pytorch", 1.5, 1.2, 1.8)]).to_csv(
        tables / "mnist-ratios.csv", index=False)
    pd.DataFrame([{"numerics": "flush"}]).to_csv(tables / "mnist-runs.csv", index=False)
    pd.DataFrame([{"framework": "pytorch", "framework_version": "1.0", "library": None, "library_version": None,
                   "cpu": "TestCPU", "cpu_flags": "avx", "cpu_count": 2, "gpus": "none", "git_commit": "abc"}]).to_csv(
        tables / "mnist-environment.csv", index=False)
    replication({}, tmp_path, ["mnist"]).reset_index().to_csv(tables / "replication.csv", index=False)
    out = tmp_path / "summary.html"
    report_python(str(FINDINGS / "summary.py"), "--sets", "mnist", "--samples", "images",
                  "--points", str(tables / "mnist-points.csv"), "--ratios", str(tables / "mnist-ratios.csv"),
                  "--runs", str(tables / "mnist-runs.csv"), "--environment", str(tables / "mnist-environment.csv"),
                  "--replication", str(tables / "replication.csv"), "--figures", str(tmp_path / "figures"),
                  "--frameworks", *FRAMEWORKS, "--overview", str(tables / "findings-overview.csv"),
                  "--mfu", str(mfu), "--out", str(out), check=True)
    page = out.read_text()
    assert "How close to the machine" in page and "bfloat16 1,000 GFLOP/s (pytorch&#x27;s product)" in page
    assert "peaks float32 347 GFLOP/s (tensorflow&#x27;s product); bfloat16" in page
    assert "chestxray pytorch batch=8 precision=mixed-bfloat16: 15% [13%, 17%] of the bfloat16 peak" in page
