"""The replication table: every claim of the four studies this benchmark reproduces, each with a
verdict computed from this run's tables, the criterion that verdict used, the figures behind it
(with their intervals, or the range of the repeats) and the report figure that shows them.

A verdict is one of VERDICTS. Throughput claims read the ratios tables (hierarchical bootstrap
intervals; what a ratio compares is read from its columns compared, numerator and denominator,
never from its text: dlbench.stats.ratios): a claim that one side is faster holds where every
interval lies above 1, does not hold where one lies below 1 (a counter-example), and is not
resolved otherwise. A ratio whose
point is contended or has short units (the ratios table's flags contended, below_minimum:
dlbench.flags) timed more than the framework, so it decides nothing: it counts as not resolved
(FLAG_RULE, applied in `verdict_of` alone). So a claim holds only where no point it rests on is
flagged, and does not hold only on a counter-example from an unflagged point; else it is not
resolved at these repeats. An unstable ratio still decides (its interval carries the spread).
Every figure from a flagged ratio names its flags. Memory and epoch claims read intervals the same
way, the process the sample: the memory pass's ratios of peaks (memory-ratios.csv: the bootstrap
over each side's processes) and each framework's first / second epoch time over the processes
that trained the convergence epochs (`epoch_ratios`, dlbench.stats.interval); a side of one
process has no interval and decides nothing (ONE_SAMPLE_RULE). A claim whose measurement this run lacks says "not measured here" and why
(the setting, or the part of the machine, that would measure it).

python replication.py --tables-dir results/tables --workloads mnist imdb ... --studies onnx ... --synthetic-images
    --out results/tables/findings-replication.csv
"""
import argparse
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from dlbench.flags import flags_of, named, withdrawing
from dlbench.frameworks import COMPILED, EAGER, FRAMEWORKS
from dlbench.stats import FLAGS, SIDES, interval as stats_interval, plain, variance_prior

HOLDS, FAILS, NOT_RESOLVED, NOT_MEASURED = "holds", "does not hold", "not resolved at these repeats", "not measured here"
VERDICTS = (HOLDS, FAILS, NOT_RESOLVED, NOT_MEASURED)
COLUMNS = ["study", "claim", "verdict", "criterion", "figures", "figure", "source"]

IMDB_STUDY = "IMDB LSTM (Borealis AI)"
DENSENET_STUDY = "multi-GPU DenseNet-121 (ilkarman)"
MNIST_STUDY = "MNIST data-parallel (r-o-s-h-a-n)"
SURVEY = "TensorFlow vs MXNet survey"


# The rule for flagged ratios, said in every throughput claim's criterion (verdict_of applies it)
FLAG_RULE = ("a ratio whose point is contended or has short units counts as not resolved; unstable ones count "
             "(their intervals carry the spread); the flags are named beside the figures")

# A verdict that rests on one process is one sample: two runs of one commit gave "The first epoch is
# slower than the second" both ways (issue 53). Intervals come from two processes or more a side.
ONE_SAMPLE_RULE = "a side of one repeat decides nothing (one sample: not resolved)"


def interval(ratio, low, high):
    return f"{ratio:.2f}x" + ("" if pd.isna(low) else f" [{low:.2f}, {high:.2f}]")


def flag_words(r, suffix=""):
    """' (unstable, contended)': a row's flags (columns flag + suffix), '' if none."""
    flags = flags_of(r, suffix)
    return f" ({named(flags)})" if flags else ""


def figure_of(r, suffix=""):
    """A ratios row's figure, e.g. '1.30x [1.10, 1.50] (contended)' (columns ratio, ci_low, ci_high
    and the flags, + suffix)."""
    return interval(r["ratio" + suffix], r["ci_low" + suffix], r["ci_high" + suffix]) + flag_words(r, suffix)


def point_of(row, skip=()):
    """A ratios row's point, key=value, without the columns that are not keys."""
    known = {"run_set", *SIDES, "framework", "ratio", "ci_low", "ci_high", "verdict", *FLAGS, *skip}
    return " ".join(f"{k}={plain(v)}" for k, v in row.items() if k not in known and pd.notna(v))


def verdict_of(holds, fails, rows, suffixes=("",)):
    """A throughput claim's verdict from its points: `holds`, `fails` (booleans, one per row of
    `rows`) say whether each point's interval shows the claim or a counter-example. FLAG_RULE: a
    row flagged contended or short units (on any side: columns flag + suffix) decides nothing.
    HOLDS if every point holds and none is flagged so, FAILS if an unflagged one fails, else
    NOT_RESOLVED."""
    holds, fails = list(map(bool, holds)), list(map(bool, fails))
    clean = [not any(withdrawing(flags_of(r, suffix)) for suffix in suffixes) for _, r in rows.iterrows()]
    if any(f and c for f, c in zip(fails, clean)):
        return FAILS
    if all(holds) and all(clean):
        return HOLDS
    return NOT_RESOLVED


def by_intervals(rows, below=False):
    """The verdict of 'the ratio is above 1' (below 1, `below`) at every point of a ratios rows
    frame: every interval beyond 1 holds, one on the other side is a counter-example (verdict_of)."""
    lows, highs = rows["ci_low"], rows["ci_high"]
    if below:
        return verdict_of(highs < 1, lows > 1, rows)
    return verdict_of(lows > 1, highs < 1, rows)


def row(study, claim, verdict, criterion, figures="", figure="", source=""):
    return dict(zip(COLUMNS, (study, claim, verdict, criterion, figures, figure, source)))


class Tables:
    """This run's tables, read on demand; a table the run did not make is None. The studies trained in
    float32: a table's rows at another precision (dlbench.precision) are left out; a ratio across
    precisions (its precision empty) compares nothing a claim reads."""

    def __init__(self, folder, workloads, frameworks):
        self.folder, self.workloads, self.frameworks = Path(folder), workloads, frameworks

    def read(self, name):
        path = self.folder / f"{name}.csv"
        if not path.exists():
            return None
        frame = pd.read_csv(path)
        return frame[frame["precision"].isna() | (frame["precision"] == "float32")] if "precision" in frame else frame

    def ratios(self, workload):
        return self.read(f"{workload}-ratios") if workload in self.workloads else None


def cross_framework(ratios, num, den):
    """Rows of `num` over `den` (either way round, turned to num / den): frameworks side by side,
    each in its default mode (dlbench.stats.comparisons)."""
    rows = []
    for _, r in ratios[ratios["compared"] == "framework"].iterrows():
        pair = (r["numerator"], r["denominator"])
        if pair not in ((num, den), (den, num)):
            continue
        ratio, low, high = r["ratio"], r["ci_low"], r["ci_high"]
        if pair == (den, num):
            ratio, low, high = 1 / ratio, 1 / high, 1 / low
        rows.append({**r.to_dict(), "ratio": ratio, "ci_low": low, "ci_high": high})
    return pd.DataFrame(rows)


def faster_claim(tables, study, claim, workload, num, den, figure):
    criterion = (f"holds if every interval of {num} / {den} steady throughput ({workload}, each in its default "
                 f"mode) lies above 1; does not hold if one lies below 1; {FLAG_RULE}")
    ratios = tables.ratios(workload)
    missing = [f for f in (num, den) if f not in tables.frameworks]
    if ratios is None or missing:
        why = f"workload {workload} not configured" if ratios is None else f"{', '.join(missing)} not configured"
        return row(study, claim, NOT_MEASURED, criterion, f"{why} (config workloads, frameworks)")
    rows = cross_framework(ratios, num, den)
    if rows.empty:
        return row(study, claim, NOT_MEASURED, criterion, f"no {num} and {den} runs at one point of {workload}")
    figures = "; ".join(f"{point_of(r)}: {figure_of(r)}" for _, r in rows.iterrows())
    return row(study, claim, by_intervals(rows), criterion, figures, figure, f"{workload}-ratios.csv")


def sparse_faster(tables):
    claim = "PyTorch's sparse embedding gradients train faster than dense ones"
    criterion = ("holds if every interval of PyTorch's sparse / dense embedding gradients steady throughput (IMDB, "
                 f"each point of the grid) lies above 1; does not hold if one lies below 1; {FLAG_RULE}")
    ratios = tables.ratios("imdb")
    rows = pd.DataFrame() if ratios is None or "pytorch" not in tables.frameworks else ratios[
        (ratios["compared"] == "grad") & (ratios["framework"] == "pytorch") & (ratios["numerator"] == "sparse")
        & (ratios["denominator"] == "dense")]
    if rows.empty:
        why = ("workload imdb or pytorch not configured (config workloads, frameworks)"
               if ratios is None or "pytorch" not in tables.frameworks else
               "PyTorch ran no sparse and dense point of IMDB (imdb.grads: [dense, sparse])")
        return row(IMDB_STUDY, claim, NOT_MEASURED, criterion, why)
    figures = "; ".join(f"{point_of(r, {'grad'})}: {figure_of(r)}" for _, r in rows.iterrows())
    return row(IMDB_STUDY, claim, by_intervals(rows), criterion, f"sparse / dense steady throughput: {figures}",
               "results/figures/imdb/sparse-speedup.png", "imdb-ratios.csv")


def quicker_to_write(tables):
    claim = "PyTorch is quicker to write (and debug)"
    criterion = ("holds if PyTorch's IMDB module has the fewest lines of framework-specific code (without comments, "
                 "docstrings and blank lines) of the configured frameworks; lines of code only: the time to write "
                 "or debug is not measured")
    lines = tables.read("findings-code-lines")
    if lines is None or "imdb" not in set(lines["run_set"]) or "pytorch" not in tables.frameworks:
        return row(IMDB_STUDY, claim, NOT_MEASURED, criterion, "no IMDB modules counted (workloads imdb, studies findings)")
    imdb = lines[lines["run_set"] == "imdb"].set_index("framework")["code_lines"]
    fewer = imdb[imdb < imdb["pytorch"]]
    figures = "; ".join(f"{f} {n:.0f}" for f, n in imdb.sort_values().items())
    verdict = HOLDS if fewer.empty else FAILS
    return row(IMDB_STUDY, claim, verdict, criterion, f"lines of code: {figures}",
               "results/figures/findings/code-lines.png", "findings-code-lines.csv")


def onnx_to_mxnet(tables):
    claim = "A model moves from PyTorch to MXNet through ONNX"
    criterion = ("holds if every exported model (onnx.models) runs in MXNet and predicts PyTorch's classes on every "
                 "test input; does not hold if one cannot be imported or disagrees")
    runtimes = tables.read("onnx-runtimes") if "onnx" in tables.workloads else None
    if runtimes is None or "mxnet" not in set(runtimes["runtime"]):
        return row(IMDB_STUDY, claim, NOT_MEASURED, criterion, "the ONNX study did not run MXNet (studies onnx, "
                                                               "frameworks mxnet)")
    mxnet = runtimes[runtimes["runtime"] == "mxnet"].groupby("model").first()
    moved = {m: r["ok"] > 0 and r["class_agreement"] == 1 for m, r in mxnet.iterrows()}
    figures = "; ".join(
        f"{m}: ran, class agreement {r['class_agreement']:.3f}, largest output difference {r['max_abs_difference']:.1e}"
        if r["ok"] > 0 else f"{m}: not run ({r['not_ok']})" for m, r in mxnet.iterrows())
    return row(IMDB_STUDY, claim, HOLDS if all(moved.values()) else FAILS, criterion, figures,
               "results/figures/onnx/runtimes.png", "onnx-runtimes.csv")


def devices_ratios(ratios, framework=None, strategy=None, model=None):
    """N / 1 devices rows (default modes; their strategy is the N-device side's), optionally of one
    framework, strategy, model."""
    if ratios is None or "strategy" not in ratios:
        return pd.DataFrame()
    keep = ratios["compared"] == "devices"
    if framework:
        keep &= ratios["framework"] == framework
    if strategy:
        keep &= ratios["strategy"] == strategy
    if model and "model" in ratios:
        keep &= ratios["model"] == model
    rows = ratios[keep]
    if "mode" in rows:
        rows = rows_where(rows, lambda r: pd.isna(r["mode"]) or r["framework"] not in FRAMEWORKS or default_mode(r))
    return rows


def densenet_scales(tables):
    claim = "Training DenseNet-121 on N devices is faster than on 1"
    criterion = ("holds if every framework's N / 1 devices steady throughput interval (DenseNet) lies above 1; does "
                 f"not hold if one lies below 1; {FLAG_RULE}")
    rows = devices_ratios(tables.ratios("chestxray"))
    if rows.empty:
        return row(DENSENET_STUDY, claim, NOT_MEASURED, criterion,
                   "DenseNet ran on one device only (chestxray.devices; 1 and 2 in presets/paper.yaml). The study's "
                   "N GPUs: no GPU on this machine (docs/environments.md, 'GPUs')")
    figures = "; ".join(f"{r['framework']} {r['comparison']}: {figure_of(r)}" for _, r in rows.iterrows())
    return row(DENSENET_STUDY, claim, by_intervals(rows), criterion, figures,
               "results/figures/chestxray/train-minutes.png", "chestxray-ratios.csv")


def real_files_cost(tables):
    claim = "Training from real image files is slower than from synthetic tensors"
    criterion = ("holds if every framework's synthetic / real steady throughput interval (DenseNet) lies above 1; "
                 f"does not hold if one lies below 1; {FLAG_RULE}")
    ratios = tables.ratios("chestxray")
    rows = pd.DataFrame() if ratios is None else ratios[
        (ratios["compared"] == "input") & (ratios["numerator"] == "synthetic") & (ratios["denominator"] == "real")]
    if rows.empty:
        return row(DENSENET_STUDY, claim, NOT_MEASURED, criterion,
                   "DenseNet trained on synthetic tensors only (chestxray.inputs; the NIH images are not "
                   "downloadable offline: chestxray.images_dir)")
    figures = "; ".join(f"{r['framework']}: {figure_of(r)}" for _, r in rows.iterrows())
    return row(DENSENET_STUDY, claim, by_intervals(rows), criterion, figures,
               "results/figures/chestxray/train-minutes.png", "chestxray-ratios.csv")


def loader_bottleneck(tables):
    claim = "The data loader is the bottleneck"
    criterion = ("holds if a loader's decoded images/s interval lies below the trainer's images/s (it cannot keep "
                 "DenseNet fed); does not hold if every loader's interval lies above it; a loader point that is "
                 "contended or has short units counts as not resolved; unstable ones count (their intervals carry "
                 "the spread); the flags are named beside the figures")
    verdicts = tables.read("chestxray-loader-verdict") if "chestxray" in tables.workloads else None
    if verdicts is None or verdicts.empty or verdicts["trainer_images_per_s"].isna().all():
        return row(DENSENET_STUDY, claim, NOT_MEASURED, criterion,
                   "no loader or decoding run beside a DenseNet run (chestxray.decode, chestxray.loader)")
    slow = verdicts["ci_high"] < verdicts["trainer_images_per_s"]
    fast = verdicts["ci_low"] > verdicts["trainer_images_per_s"]
    # "some loader is slow" is the negation of "every loader keeps up", which verdict_of decides
    verdict = {HOLDS: FAILS, FAILS: HOLDS}.get(verdict_of(fast, slow, verdicts), NOT_RESOLVED)
    figures = "; ".join(f"{r['loader']} {r['workers']} workers: {r['images_per_s']:,.0f} [{r['ci_low']:,.0f}, "
                        f"{r['ci_high']:,.0f}] images/s{flag_words(r)} against the trainer's "
                        f"{r['trainer_images_per_s']:,.1f}" for _, r in verdicts.iterrows())
    return row(DENSENET_STUDY, claim, verdict, criterion, figures, "results/figures/chestxray/loaders.png",
               "chestxray-loader-verdict.csv")


def similar_auc(tables, synthetic):
    claim = "Every framework reaches a similar test AUC"
    criterion = "holds if the ranges of the frameworks' repeats of test AUC (macro, 14 findings) overlap"
    auc = tables.read("chestxray-test-auc") if "chestxray" in tables.workloads else None
    if synthetic or auc is None or auc.empty:
        return row(DENSENET_STUDY, claim, NOT_MEASURED, criterion,
                   "synthetic images carry no finding: their AUC is chance (chestxray.images_dir, the NIH PNGs)"
                   if synthetic else "no DenseNet test AUC (workload chestxray)")
    spread = auc.groupby("framework")["test_auc_macro"].agg(["mean", "min", "max"])
    verdict = HOLDS if spread["min"].max() <= spread["max"].min() else FAILS
    figures = "; ".join(f"{f} {r['mean']:.3f} ({r['min']:.3f}-{r['max']:.3f})" for f, r in spread.iterrows())
    return row(DENSENET_STUDY, claim, verdict, criterion, figures, "results/figures/chestxray/auc.png",
               "chestxray-test-auc.csv")


def tensorflow_scales_better(tables):
    claim = "TensorFlow scales up better than PyTorch DataParallel"
    criterion = ("holds if TensorFlow's N / 1 devices interval (MirroredStrategy) lies above PyTorch DataParallel's "
                 f"at the same point; does not hold if it lies below; {FLAG_RULE}")
    ratios = tables.ratios("mnist")
    tf = devices_ratios(ratios, "tensorflow", "mirrored")
    pt = devices_ratios(ratios, "pytorch", "dp")
    if pt.empty or tf.empty:
        return row(MNIST_STUDY, claim, NOT_MEASURED, criterion,
                   "PyTorch DataParallel runs on GPUs only: not applicable on this machine's CPU (docs/environments.md, 'GPUs')"
                   if pt.empty else "TensorFlow ran no MirroredStrategy point (mnist.strategies.tensorflow)")
    # the same point on the same N devices (numerator), each with its own strategy
    keys = [k for k in ("model", "batch", "duplicate", "numerator") if k in tf]
    both = tf.merge(pt, on=keys, suffixes=("_tf", "_pt"))
    if both.empty:
        return row(MNIST_STUDY, claim, NOT_MEASURED, criterion, "TensorFlow and PyTorch DataParallel ran no point on "
                                                                "the same devices (mnist.devices)")
    verdict = verdict_of(both["ci_low_tf"] > both["ci_high_pt"], both["ci_high_tf"] < both["ci_low_pt"], both,
                         ("_tf", "_pt"))
    figures = "; ".join(" ".join(f"{k}={plain(r[k])}" for k in keys[:-1]) + f" {r['numerator']} / 1 devices: "
                        f"TensorFlow {figure_of(r, '_tf')}, PyTorch {figure_of(r, '_pt')}" for _, r in both.iterrows())
    return row(MNIST_STUDY, claim, verdict, criterion, figures, "results/figures/mnist/scale-up.png", "mnist-ratios.csv")


def epoch_ratios(convergence):
    """Each framework's first / second epoch time (its default mode, one device) over the processes
    that trained the convergence epochs (mnist.convergence_repeats): the mean of the processes'
    ratios with its 95% interval (dlbench.stats.interval, as for throughput: each process's ratio a
    repeat of one unit, resampled over processes, Student's t; the frameworks lend each other their
    spread between processes, dlbench.stats.variance_prior), the processes' range and count; none
    from one process. None if the runs trained fewer than two epochs."""
    ok = rows_where(convergence[(convergence["status"] == "ok") & (convergence["devices"] == 1)], default_mode)
    ok = ok[ok["segment"].notna()]  # the repeats that carry segments: the later ones measure throughput only
    epochs = ok.pivot_table(index=["framework", "run_id"], columns="segment", values="wall_s")
    if 1 not in epochs or 2 not in epochs:
        return None
    per_process = (epochs[1] / epochs[2]).dropna()
    samples = {framework: [np.array([value]) for value in group]
               for framework, group in per_process.groupby(level="framework")}
    prior = variance_prior(list(samples.values()))
    rows = []
    for framework, repeats in samples.items():
        ratio, low, high = stats_interval([repeats], 0.95, 2000, 0, prior)
        values = [r[0] for r in repeats]
        rows.append({"framework": framework, "ratio": ratio, "ci_low": low, "ci_high": high, "min": min(values),
                     "max": max(values), "repeats": len(values)})
    return pd.DataFrame(rows, columns=["framework", "ratio", "ci_low", "ci_high", "min", "max", "repeats"])


def slow_first_epoch(tables):
    claim = "The first epoch is slower than the second"
    criterion = ("holds if every framework's first / second epoch time interval (its default mode, one device; over "
                 "the repeats that train the convergence epochs, each a cold process: mnist.convergence_repeats) lies "
                 "above 1; does not hold if one lies below 1; "
                 f"{ONE_SAMPLE_RULE}")
    convergence = tables.read("mnist-convergence") if "mnist" in tables.workloads else None
    if convergence is None or convergence.empty:
        return row(MNIST_STUDY, claim, NOT_MEASURED, criterion, "workload mnist not configured")
    ratios = epoch_ratios(convergence)
    if ratios is None:
        return row(MNIST_STUDY, claim, NOT_MEASURED, criterion, "fewer than two convergence epochs (mnist.convergence_epochs)")
    figures = "; ".join(f"{r['framework']} {interval(r['ratio'], r['ci_low'], r['ci_high'])} ({r['repeats']:.0f} "
                        + ("repeats" if r["repeats"] != 1 else "repeat: no interval") + ")" for _, r in ratios.iterrows())
    return row(MNIST_STUDY, claim, by_intervals(ratios), criterion,
               f"first / second epoch time, mean of the processes [95% interval]: {figures}",
               "results/figures/mnist/first-vs-second-epoch.png", "mnist-convergence.csv")


def small_model_does_not_scale(tables):
    claim = "The small model does not gain from more devices"
    criterion = ("holds if every N / 1 devices interval of the small model lies below 1 (slower on more devices); "
                 f"does not hold if one lies above 1 (a gain); {FLAG_RULE}")
    rows = devices_ratios(tables.ratios("mnist"), model="small")
    if rows.empty:
        return row(MNIST_STUDY, claim, NOT_MEASURED, criterion, "no small-model run on several devices (mnist.devices)")
    figures = "; ".join(f"{r['framework']} {r['comparison']}: {figure_of(r)}" for _, r in rows.iterrows())
    return row(MNIST_STUDY, claim, by_intervals(rows, below=True), criterion, figures,
               "results/figures/mnist/scale-up.png", "mnist-ratios.csv")


def kinds_pairs(ratios):
    """A framework's compiled mode over its eager one, from its modes' ratios rows."""
    rows, points = [], []
    for _, r in ratios[ratios["compared"] == "mode"].iterrows():
        framework = r["framework"]
        if framework not in FRAMEWORKS:
            continue
        kinds = dict(FRAMEWORKS[framework].modes)
        num, den = r["numerator"], r["denominator"]
        if {kinds.get(num), kinds.get(den)} != {COMPILED, EAGER}:
            continue
        ratio, low, high = r["ratio"], r["ci_low"], r["ci_high"]
        if kinds[num] == EAGER:
            num, den, ratio, low, high = den, num, 1 / ratio, 1 / high, 1 / low
        rows.append({"framework": framework, "run_set": r["run_set"], "compiled": num, "eager": den,
                     "ratio": ratio, "ci_low": low, "ci_high": high, **{name: True for name in flags_of(r)}})
        points.append(r.drop(RATIO_COLUMNS, errors="ignore"))
    pairs = pd.DataFrame(rows)
    return pairs.assign(point=point_names(pairs, pd.DataFrame(points))) if rows else pairs


# a ratios row's columns that are not its point's: what it compares and what it found
RATIO_COLUMNS = ["run_set", "comparison", "compared", "numerator", "denominator", "framework", "mode", "ratio",
                 "ci_low", "ci_high", "verdict", *FLAGS]


def point_names(pairs, points):
    """What names each pair's point among its framework's pairs of one run set: the point's columns
    that differ between them ("devices=2 strategy=mirrored"), "" where it has only one."""
    names = []
    for i, key in enumerate(zip(pairs["framework"], pairs["run_set"])):
        differing = points[[k == key for k in zip(pairs["framework"], pairs["run_set"])]].nunique(dropna=False) > 1
        names.append(" ".join(f"{c}={plain(points.iloc[i][c])}" for c in points.columns[differing]
                              if not pd.isna(points.iloc[i][c])))
    return names


def graphs_faster(tables):
    claim = "Graphs (compiled modes) train faster than imperative code"
    criterion = ("holds if every framework's compiled / eager steady throughput interval lies above 1; does not hold "
                 f"if one lies below 1; {FLAG_RULE}")
    frames = [t for t in map(tables.ratios, ("mnist", "imdb", "chestxray")) if t is not None]
    pairs = kinds_pairs(pd.concat(frames, ignore_index=True)) if frames else pd.DataFrame()
    if pairs.empty:
        return row(SURVEY, claim, NOT_MEASURED, criterion, "no framework ran a compiled and an eager mode of one point "
                                                           "(mnist.modes)")
    figures = "; ".join(f"{r['framework']} {r['compiled']} / {r['eager']} ({' '.join(filter(None, [r['run_set'], r['point']]))}): "
                        f"{figure_of(r)}" for _, r in pairs.iterrows())
    return row(SURVEY, claim, by_intervals(pairs), criterion, figures,
               "results/figures/mnist/modes.png", "mnist-ratios.csv")


def rows_where(frame, test):
    """The rows for which test(row) is true (an empty frame keeps its columns)."""
    return frame[frame.apply(test, axis=1).astype(bool)] if len(frame) else frame


def memory_figure(r, num, den):
    """'MXNet 396 / TensorFlow 737 MiB: 0.54x [0.50, 0.58] (3 / 3 processes)'."""
    return (f"{num} {r['numerator_mib']:.0f} / {den} {r['denominator_mib']:.0f} MiB: "
            f"{interval(r['ratio'], r['ci_low'], r['ci_high'])} ({r['repeats_numerator']:.0f} / "
            f"{r['repeats_denominator']:.0f} processes)")


def default_mode(r):
    return r["framework"] in FRAMEWORKS and r["mode"] == FRAMEWORKS[r["framework"]].default_mode


def memory_ratios(tables):
    """The memory pass's ratios of peaks with their intervals (memory-ratios.csv), or None."""
    return tables.read("memory-ratios") if "memory" in tables.workloads else None


def turned(rows, num):
    """Ratios rows with `num` as the numerator (a row the other way round turned: 1 / ratio, its
    bounds swapped, its sides' figures swapped)."""
    found = []
    for _, r in rows.iterrows():
        r = r.to_dict()
        if r["numerator"] != num:
            r.update(numerator=r["denominator"], denominator=r["numerator"], ratio=1 / r["ratio"],
                     ci_low=1 / r["ci_high"], ci_high=1 / r["ci_low"], numerator_mib=r["denominator_mib"],
                     denominator_mib=r["numerator_mib"], repeats_numerator=r["repeats_denominator"],
                     repeats_denominator=r["repeats_numerator"])
        found.append(r)
    return pd.DataFrame(found)


def mxnet_less_memory(tables):
    claim = "MXNet uses less memory than TensorFlow"
    criterion = ("holds if every interval of MXNet / TensorFlow peak resident memory of the training process (the "
                 "memory pass: the bootstrap over each side's processes, memory.repeats) lies below 1 at every point "
                 "of the same model and batch, each in its default mode; does not hold if one lies above 1; "
                 f"{ONE_SAMPLE_RULE}")
    ratios = memory_ratios(tables)
    rows = pd.DataFrame() if ratios is None else ratios[
        (ratios["compared"] == "framework") & ratios["numerator"].isin(["mxnet", "tensorflow"])
        & ratios["denominator"].isin(["mxnet", "tensorflow"])]
    if rows.empty:
        return row(SURVEY, claim, NOT_MEASURED, criterion, "the memory pass did not run MXNet and TensorFlow "
                                                           "(studies memory)")
    rows = turned(rows, "mxnet")
    figures = "; ".join(f"{r['workload']} batch {plain(r['batch'])}: {memory_figure(r, 'MXNet', 'TensorFlow')}"
                        for _, r in rows.iterrows())
    return row(SURVEY, claim, by_intervals(rows, below=True), criterion, figures,
               "results/figures/memory/peak-memory.png", "memory-ratios.csv")


def graphs_less_memory(tables):
    claim = "Graphs (compiled modes) use less memory than imperative code"
    criterion = ("holds if, in every framework with both kinds of mode, every interval of the compiled / eager mode's "
                 "peak resident memory (the memory pass: the bootstrap over each side's processes, memory.repeats) "
                 "lies below 1 at every point; does not hold if one lies above 1; "
                 f"{ONE_SAMPLE_RULE}")
    ratios = memory_ratios(tables)
    found = []
    for _, r in (pd.DataFrame() if ratios is None else ratios[ratios["compared"] == "mode"]).iterrows():
        kinds = dict(FRAMEWORKS[r["framework"]].modes) if r["framework"] in FRAMEWORKS else {}
        sides = {kinds.get(r["numerator"]): r["numerator"], kinds.get(r["denominator"]): r["denominator"]}
        if set(sides) == {COMPILED, EAGER}:
            found.append(turned(pd.DataFrame([r]), sides[COMPILED]))
    rows = pd.concat(found, ignore_index=True) if found else pd.DataFrame()
    if rows.empty:
        return row(SURVEY, claim, NOT_MEASURED, criterion, "the memory pass ran no framework in a compiled and an "
                                                           "eager mode (mnist.modes, studies memory)")
    figures = "; ".join(f"{r['framework']} ({r['workload']} batch {plain(r['batch'])}): "
                        f"{memory_figure(r, r['numerator'], r['denominator'])}" for _, r in rows.iterrows())
    return row(SURVEY, claim, by_intervals(rows, below=True), criterion, figures,
               "results/figures/memory/peak-memory.png", "memory-ratios.csv")


def tensorflow_core_devices(tables):
    claim = "TensorFlow gains by treating each CPU core as a device"
    criterion = ("holds if TensorFlow's MirroredStrategy over N CPU devices / 1 device with the same threads lies "
                 f"above 1; does not hold if below; {FLAG_RULE}")
    rows = devices_ratios(tables.ratios("mnist"), "tensorflow", "mirrored")
    if rows.empty:
        return row(SURVEY, claim, NOT_MEASURED, criterion, "TensorFlow ran no MirroredStrategy point on several CPU "
                                                           "devices (mnist.devices, mnist.strategies.tensorflow)")
    figures = "; ".join(f"{point_of(r, {'devices', 'strategy'})}: {r['comparison']} {figure_of(r)}"
                        for _, r in rows.iterrows())
    return row(SURVEY, claim, by_intervals(rows), criterion, figures,
               "results/figures/mnist/scale-up.png", "mnist-ratios.csv")


def replication(tables, synthetic):
    return pd.DataFrame([
        faster_claim(tables, IMDB_STUDY, "MXNet trains the LSTM faster than PyTorch", "imdb", "mxnet", "pytorch",
                     "results/figures/findings/ratios-imdb.png"),
        sparse_faster(tables),
        quicker_to_write(tables),
        onnx_to_mxnet(tables),
        densenet_scales(tables),
        real_files_cost(tables),
        loader_bottleneck(tables),
        similar_auc(tables, synthetic),
        faster_claim(tables, MNIST_STUDY, "TensorFlow processes more images per second than PyTorch", "mnist",
                     "tensorflow", "pytorch", "results/figures/findings/ratios-mnist.png"),
        tensorflow_scales_better(tables),
        slow_first_epoch(tables),
        small_model_does_not_scale(tables),
        mxnet_less_memory(tables),
        graphs_faster(tables),
        graphs_less_memory(tables),
        tensorflow_core_devices(tables),
    ], columns=COLUMNS)


# The studies' own published figures (data, with their sources, hardware and versions), set beside this run's
STUDIES_FIGURES = Path(__file__).resolve().parents[1] / "studies.yaml"
STUDY_COLUMNS = ["study_figure", "study_hardware", "this_run_figure", "this_run_hardware"]


def this_hardware(folder):
    """This run's machine, as the environment tables name it: 'Intel Xeon ... (2 cores), no GPU'."""
    frames = [pd.read_csv(path) for path in sorted(Path(folder).glob("*-environment.csv"))]
    env = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if env.empty or "cpu" not in env:
        return "this machine (no environment table)"
    cpus = "; ".join(sorted(set(env["cpu"].dropna().astype(str))))
    cores = "/".join(sorted(set(env["cpu_count"].dropna().astype(int).astype(str)))) if "cpu_count" in env else "?"
    gpus = sorted(set(env["gpus"].dropna().astype(str)) - {"none"}) if "gpus" in env else []
    return f"{cpus} ({cores} cores), " + ("; ".join(gpus) if gpus else "no GPU")


def beside_figures(tables, claim, beside):
    """This run's figure of the study's quantity: the ratios rows `beside` names (each point with its
    interval and flags), or the claim's own figures where they are that quantity ('claim'); '' if none."""
    if beside == "claim":
        return "" if claim["verdict"] == NOT_MEASURED or pd.isna(claim["figures"]) else str(claim["figures"])
    if not isinstance(beside, dict):
        return ""
    ratios = tables.ratios(beside["ratios"])
    if ratios is None or ratios.empty:
        return ""
    keep = pd.Series(True, index=ratios.index)
    for key, value in beside.items():
        if key != "ratios":
            keep &= ratios[key].map(lambda v: str(plain(v))) == str(value) if key in ratios else False
    rows = ratios[keep]
    if "mode" in rows and beside.get("compared") != "mode":
        rows = rows_where(rows, lambda r: pd.isna(r["mode"]) or r.get("framework") not in FRAMEWORKS or default_mode(r))
    return "; ".join(" ".join(str(part) for part in (r.get("framework"), point_of(r), r["comparison"])
                              if pd.notna(part) and part != "") + f": {figure_of(r)}" for _, r in rows.iterrows())


def with_study_figures(claims, tables, path=STUDIES_FIGURES):
    """The claims with the studies' own figures beside this run's (studies.yaml): `study_figure` (each
    study's figure of the claim's quantity, its setting, or that it published none), `study_hardware`
    (the machine and versions it was measured on), `this_run_figure` (this run's same quantity with its
    interval, or 'not measured here' and why) and `this_run_hardware`."""
    data = yaml.safe_load(Path(path).read_text())
    hardware = this_hardware(tables.folder)
    found = {column: [] for column in STUDY_COLUMNS}
    for _, claim in claims.iterrows():
        entries = [e for e in data["figures"] if re.search(e["claim"], claim["claim"], re.IGNORECASE)]
        studies, figures, mine = [], [], []
        for entry in entries:
            study = data["studies"][entry["study"]]
            own = "" if entry["study"] == claim["study"] else f"{entry['study']}: "
            figures.append(f"{own}{entry['quantity']}: " + (entry["figure"] or "no figure published (a qualitative "
                                                                                 "claim)"))
            studies.append(f"{entry['study']}: {study['hardware']}; {study['software']} ({study['source']})")
            measured = beside_figures(tables, claim, entry.get("beside"))
            if measured and measured not in mine:
                mine.append(measured)
            # what this run cannot measure (GPUs, the NIH images), beside what it measured of the quantity
            unmeasured = f"not measured here: {entry.get('not_here')}"
            if entry.get("not_here") and (not measured or claim["verdict"] == NOT_MEASURED) and unmeasured not in mine:
                mine.append(unmeasured)
        if not mine and claim["verdict"] == NOT_MEASURED:
            mine.append(f"not measured here: {claim['figures']}")
        found["study_figure"].append(" | ".join(figures) or "no published figure found (studies.yaml)")
        found["study_hardware"].append(" | ".join(dict.fromkeys(studies)))
        found["this_run_figure"].append(" | ".join(mine))
        found["this_run_hardware"].append(hardware)
    return claims.assign(**found)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tables-dir", required=True, type=Path, help="results/tables")
    parser.add_argument("--workloads", nargs="*", default=[], help="the configured workloads")
    parser.add_argument("--studies", nargs="*", default=[], help="the configured studies")
    parser.add_argument("--frameworks", nargs="*", default=[], help="the configured frameworks")
    parser.add_argument("--synthetic-images", action="store_true", help="DenseNet's images are synthetic")
    parser.add_argument("--studies-figures", type=Path, default=STUDIES_FIGURES,
                        help="the studies' own published figures (studies.yaml)")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    tables = Tables(args.tables_dir, [*args.workloads, *args.studies], args.frameworks)
    claims = with_study_figures(replication(tables, args.synthetic_images), tables, args.studies_figures)
    tmp = args.out.with_name(args.out.name + ".tmp")
    claims.to_csv(tmp, index=False)
    os.replace(tmp, args.out)
    for _, claim in claims.iterrows():
        print(f"{claim['study']}: {claim['claim']}: {claim['verdict']}")


if __name__ == "__main__":
    main()
