"""The DenseNet (DenseNet-121) study's table and charts, and the loader and preprocessing results; the
throughputs as the mean of their repeats with hierarchical bootstrap intervals (the points tables)."""
import argparse
from pathlib import Path

import pandas as pd
import seaborn as sns

from dlbench.plots import (NOT_FRAMEWORK_PALETTE, REPEATS_RANGE, REPEATS_RANGE_NOTE, convergence_runs, interval_plot,
                           loss_curves, modes_figure, precision_figure, no_data, palette, save, with_numerics)

FIGURES = ("train-minutes", "auc", "preprocess", "loaders", "utilisation", "loss", "modes", "precision")


def read_ok(path):
    frame = pd.read_csv(path)
    return frame[frame["status"] == "ok"].copy()


def train_minutes(runs):
    """Train + validation minutes of an epoch of each run, as the study timed them: the
    training set at the steady seconds per step, plus one evaluation (the final one's time:
    validation and test sets are evaluated the same way)."""
    minutes = runs[["framework", "run_id", "input", "devices", "nodes", "strategy", "mode", "precision", "repeat"]].copy()
    minutes["minutes"] = (runs["epoch_s"] + runs["final_eval_s"].fillna(0)) / 60
    return minutes.dropna(subset=["minutes"])


def study_table(minutes):
    """Mean train + validation minutes: framework and devices (rows) by real or synthetic data."""
    table = minutes.pivot_table(index=["framework", "devices", "nodes", "strategy", "mode", "precision"], columns="input",
                                values="minutes",
                                aggfunc="mean")
    table.columns = [f"{column} data (min)" for column in table.columns]
    return table.reset_index()


def trainer_rates(training_points):
    """The images/s (mean of the repeats) each framework's DenseNet consumes on one device when data
    costs nothing: its training on synthetic tensors already in memory, in float32."""
    fed = training_points[(training_points["input"] == "synthetic") & (training_points["devices"] == 1)
                          & (training_points.get("precision", "float32") == "float32")]
    return fed.groupby("framework")["mean"].max()


def loader_rates(loader_points, decode_points):
    """The framework loaders' and the image libraries' points in one table, named by loader."""
    rates = pd.concat([
        loader_points.assign(loader=loader_points["framework"] + " loader", format="jpeg"),
        decode_points.assign(loader=decode_points["library"] + " (no framework)"),
    ], ignore_index=True)
    return rates.astype({"workers": int})  # not float where one of the two has no points


def loader_verdict(training_points, rates):
    """Which loaders keep a trainer fed: the whole interval of their images/s at or above the
    synthetic-data training images/s of one device (of the same framework; of the fastest
    framework for the image libraries)."""
    fed = trainer_rates(training_points)
    fastest = fed.max() if len(fed) else float("nan")  # no synthetic-data training: no trainer to compare with
    verdict = pd.DataFrame({
        "loader": rates["loader"], "format": rates["format"], "workers": rates["workers"],
        "images_per_s": rates["mean"], "ci_low": rates["ci_low"], "ci_high": rates["ci_high"],
        **{name: rates[name] for name in ("unstable", "below_minimum", "contended") if name in rates},
        "trainer_images_per_s": [fed.get(fw, fastest) if name.endswith(" loader") else fastest
                                 for fw, name in zip(rates["framework"], rates["loader"])],
    })
    # empty (not False) where there is no trainer's rate: not measured
    verdict["keeps_trainer_fed"] = (verdict["ci_low"] >= verdict["trainer_images_per_s"]).where(
        verdict["trainer_images_per_s"].notna())
    return verdict


def auc_table(training):
    """Test AUC of the runs that trained alike (convergence_runs: the repeats that trained the
    convergence steps, where any did)."""
    training = convergence_runs(training)
    columns = [c for c in training.columns if c.startswith("test_auc_per_pathology_")]
    table = training[["framework", "input", "devices", "nodes", "strategy", "repeat", "test_auc_macro", *columns]]
    return table.rename(columns={c: c.removeprefix("test_auc_per_pathology_") for c in columns})


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    for name in ("runs", "convergence", "units", "points", "ratios", "utilisation", "loader-points", "preprocess-points",
                 "decode-points"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--outdir", required=True, type=Path)
    parser.add_argument("--minutes-table", required=True)
    parser.add_argument("--auc-table", required=True)
    parser.add_argument("--verdict-table", required=True)
    parser.add_argument("--image-source", required=True, help="'synthetic images' or 'NIH images'")
    parser.add_argument("--model", required=True, help="the DenseNet the runs trained, e.g. DenseNet-121")
    args = parser.parse_args()
    args.outdir.mkdir(parents=True, exist_ok=True)
    source = f"({args.image_source})"
    training = read_ok(args.runs)
    points, loaders, preprocess, decode = (pd.read_csv(p) for p in (args.points, args.loader_points,
                                                                     args.preprocess_points, args.decode_points))
    rates = loader_rates(loaders, decode)

    loss_curves(pd.read_csv(args.convergence), pd.read_csv(args.units), args.outdir / "loss.png",
                f"{args.model}: do the frameworks' training losses follow one another? {source}")
    precision_figure(pd.read_csv(args.ratios), read_ok(args.runs), args.outdir / "precision.png",
                     f"{args.model}: what does mixed precision buy each framework? (throughput ratio, {args.image_source})")
    modes_figure(pd.read_csv(args.ratios), read_ok(args.runs), args.outdir / "modes.png",
                 with_numerics(f"{args.model}: how much faster is each execution mode than its framework's default? "
                               f"(throughput ratio, {args.image_source})", training))
    minutes = train_minutes(training) if not training.empty else pd.DataFrame(
        columns=["framework", "input", "devices", "nodes", "strategy", "mode", "precision", "repeat", "minutes"])
    study_table(minutes).to_csv(args.minutes_table, index=False) if not minutes.empty else \
        pd.DataFrame(columns=["framework", "devices", "nodes", "strategy", "mode", "precision"]).to_csv(
            args.minutes_table, index=False)
    auc = auc_table(training) if "test_auc_macro" in training else pd.DataFrame(columns=["framework"])
    auc.to_csv(args.auc_table, index=False)
    loader_verdict(points, rates).to_csv(args.verdict_table, index=False)

    if minutes.empty:
        no_data(args.outdir / "train-minutes.png", f"no successful {args.model} run")
    else:
        minutes["devices"] = (minutes["devices"].astype(str) + minutes["nodes"].map(lambda n: f" on {n} nodes" if n > 1 else "")
                              + " (" + minutes["strategy"] + ")")
        minutes["framework"] = (minutes["framework"] + " " + minutes["mode"]
                                + minutes["precision"].map(lambda p: "" if p == "float32" else f" {p}"))
        grid = sns.catplot(data=minutes, x="minutes", y="framework", hue="input", col="devices", kind="bar",
                           errorbar=REPEATS_RANGE, palette=NOT_FRAMEWORK_PALETTE, height=3.5, aspect=1.2)
        grid.set(xlabel=f"train + validation of an epoch (min)\n{REPEATS_RANGE_NOTE}", ylabel="")
        save(grid, args.outdir / "train-minutes.png",
             with_numerics(f"{args.model}: how long does an epoch take in each framework? {source}", training))

    if auc.empty or auc["test_auc_macro"].isna().all():
        no_data(args.outdir / "auc.png", "no test AUC (a split with one class only has none)")
    else:
        auc = auc.assign(run=auc["framework"] + " x" + auc["devices"].astype(str) + " " + auc["input"])
        grid = sns.catplot(data=auc, x="test_auc_macro", y="run", kind="bar", errorbar=REPEATS_RANGE, hue="framework",
                           palette=palette(auc["framework"].unique()), dodge=False, legend=False, height=3.5,
                           aspect=1.4)
        grid.refline(x=0.5, color="grey", linestyle=":")
        grid.set(xlabel=f"test AUC (0 to 1, macro over the pathologies; dotted: 0.5, chance)\n{REPEATS_RANGE_NOTE}",
                 ylabel="", xlim=(0, 1))
        save(grid, args.outdir / "auc.png", f"{args.model}: does every framework's model learn the pathologies? {source}")

    interval_plot(preprocess, preprocess["library"] + " " + preprocess["format"], "mean", "ci_low", "ci_high",
                  args.outdir / "preprocess.png", f"Which image library preprocesses fastest? {source}",
                  "images/s: decode 1024x1024, resize, encode, write\n"
                  "(dot: mean of the repeats, bar: bootstrap interval)")

    names = rates["loader"] + " " + rates["format"] + " workers=" + rates["workers"].astype(str)
    fed = trainer_rates(points)
    # the trainers loader_verdict compares with: each framework loader's own, the fastest for the image libraries
    compared = fed[fed.index.isin(rates["framework"]) | (fed.index == fed.idxmax())] if len(fed) else None
    interval_plot(rates, names, "mean", "ci_low", "ci_high", args.outdir / "loaders.png",
                  f"Which loaders keep a {args.model} trainer fed? {source}",
                  "images/s (dot: mean of the repeats, bar: bootstrap interval)", reference=compared,
                  reference_label="dotted: {} training on synthetic data, 1 device (images/s)")

    samples = pd.read_csv(args.utilisation)
    if samples.empty:
        no_data(args.outdir / "utilisation.png", "no utilisation samples")
    else:
        samples["run"] = samples["input"] + " x" + samples["devices"].astype(str) + " " + samples["mode"]
        gpu = [c for c in samples.columns if c.startswith("gpu_percent_")]
        long = samples.melt(id_vars=["framework", "run", "repeat", "t_s"], value_vars=["cpu_percent", *gpu],
                            var_name="device", value_name="utilisation")
        # a line per repeat: their samples fall at different times, so there is no mean to draw
        grid = sns.relplot(data=long, x="t_s", y="utilisation", hue="run", style="device", col="framework",
                           units="repeat", estimator=None, col_wrap=4, palette=NOT_FRAMEWORK_PALETTE, kind="line",
                           height=2.5, aspect=1.4, linewidth=0.8)
        grid.set(xlabel="time since the run started (s)", ylabel="utilisation (%)", ylim=(0, 105))
        save(grid, args.outdir / "utilisation.png",
             f"{args.model}: how busy does each framework keep the CPU (and GPU)? (one line per repeat, "
             f"{args.image_source})")


if __name__ == "__main__":
    main()
