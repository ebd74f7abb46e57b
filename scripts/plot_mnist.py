"""The MNIST study's figures from the runs and epochs tables."""
import argparse
from pathlib import Path

import pandas as pd
import seaborn as sns

from dlbench.plots import no_data, save


def label(frame):
    """framework/strategy, e.g. pytorch/ddp; one device is 'single' everywhere."""
    return frame["framework"] + "/" + frame["strategy"]


def strategy_lines(runs):
    """One line per framework and data-parallel strategy, each starting at its framework's
    one-device runs (which have no strategy): rows of 'run' like pytorch/ddp."""
    parts = []
    for framework, rows in runs.groupby("framework"):
        single = rows[rows["devices"] == 1]
        strategies = sorted(set(rows.loc[rows["devices"] > 1, "strategy"])) or ["single"]
        for strategy in strategies:
            line = pd.concat([single, rows[(rows["devices"] > 1) & (rows["strategy"] == strategy)]])
            parts.append(line.assign(run=f"{framework}/{strategy}"))
    return pd.concat(parts, ignore_index=True)


def with_scale_up(runs):
    """images/s relative to the same framework, model, data and batch on one device."""
    keys = ["framework", "model", "duplicate", "batch", "repeat"]
    single = runs[runs["devices"] == 1][keys + ["samples_per_s"]].rename(columns={"samples_per_s": "single_device"})
    merged = runs.merge(single, on=keys, how="left")
    merged["scale_up"] = merged["samples_per_s"] / merged["single_device"]
    return merged


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", required=True)
    parser.add_argument("--epochs", required=True)
    parser.add_argument("--outdir", required=True, type=Path)
    args = parser.parse_args()
    args.outdir.mkdir(parents=True, exist_ok=True)
    runs = pd.read_csv(args.runs)
    runs = runs[runs["status"] == "ok"].copy()
    figures = ("throughput", "first-vs-second-epoch", "scale-up", "accuracy")
    if runs.empty:
        for name in figures:
            no_data(args.outdir / f"{name}.png", "no successful MNIST run")
        return
    models = [m for m in ("small", "large") if m in set(runs["model"])]
    runs["dataset"] = "x" + runs["duplicate"].astype(str)
    style = "batch" if runs["batch"].nunique() > 1 else None

    lines = strategy_lines(runs)
    grid = sns.relplot(data=lines, x="devices", y="samples_per_s", hue="run", style=style, col="model",
                       col_order=models, row="dataset", kind="line", marker="o", errorbar="sd",
                       facet_kws={"sharey": False}, height=3, aspect=1.2)
    grid.set(xticks=sorted(runs["devices"].unique()), ylabel="images/s (steady epochs)")
    save(grid, args.outdir / "throughput.png", "MNIST training throughput by device count")

    epochs = pd.read_csv(args.epochs)
    epochs = epochs[(epochs["status"] == "ok") & epochs["epoch"].isin([1, 2])].copy()
    epochs["run"] = label(epochs) + " x" + epochs["devices"].astype(str) + " (" + epochs["duplicate"].map("data x{}".format) + ")"
    epochs["epoch"] = epochs["epoch"].map({1: "first", 2: "second"})
    grid = sns.catplot(data=epochs.sort_values(["framework", "devices"]), y="run", x="wall_s", hue="epoch",
                       col="model", col_order=models, kind="bar", errorbar="sd", sharex=False, sharey=False,
                       height=3.5, aspect=1.3)
    grid.set(xlabel="epoch wall time (s)", ylabel="")
    save(grid, args.outdir / "first-vs-second-epoch.png", "MNIST first vs second epoch")

    scaled = strategy_lines(with_scale_up(runs))
    grid = sns.relplot(data=scaled, x="devices", y="scale_up", hue="run", style=style, col="model",
                       col_order=models, row="dataset", kind="line", marker="o", errorbar="sd", height=3,
                       aspect=1.2)
    for ax in grid.axes.flat:
        devices = sorted(runs["devices"].unique())
        ax.plot(devices, devices, color="grey", linestyle=":", label="linear")
    grid.set(xticks=sorted(runs["devices"].unique()), ylabel="images/s relative to 1 device")
    save(grid, args.outdir / "scale-up.png", "MNIST scale-up relative to one device")

    runs["run"] = label(runs)
    grid = sns.catplot(data=runs, y="run", x="final_test_accuracy", col="model", col_order=models, kind="bar",
                       errorbar="sd", height=3.5, aspect=1.3)
    grid.set(xlabel="test accuracy after the last epoch", ylabel="", xlim=(0, 1))
    save(grid, args.outdir / "accuracy.png", "MNIST test accuracy")


if __name__ == "__main__":
    main()
