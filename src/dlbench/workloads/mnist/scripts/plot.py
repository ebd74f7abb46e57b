"""The MNIST study's figures from the runs, convergence, units, points and ratios tables:
throughput and scale-up as means of the repeats with their bootstrap intervals, flagged where a point is
not steady; the first and second epoch (the first two convergence segments, an epoch each);
every framework's loss by step. Accuracy, epochs and losses are of the repeats that train the
convergence segments (measurement.convergence_repeats)."""
import argparse
from pathlib import Path

import pandas as pd
import seaborn as sns

from dlbench.plots import (NOT_FRAMEWORK_PALETTE, REPEATS_RANGE, REPEATS_RANGE_NOTE, convergence_runs, interval_plot,
                           loss_curves, modes_figure, no_data, palette, point_label, precision_figure, save,
                           with_numerics)


def label(frame):
    """framework/strategy mode, e.g. pytorch/ddp compile; one device is 'single' everywhere."""
    return frame["framework"] + "/" + frame["strategy"] + " " + frame["mode"]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", required=True)
    parser.add_argument("--convergence", required=True)
    parser.add_argument("--units", required=True)
    parser.add_argument("--points", required=True)
    parser.add_argument("--ratios", required=True)
    parser.add_argument("--outdir", required=True, type=Path)
    args = parser.parse_args()
    args.outdir.mkdir(parents=True, exist_ok=True)
    runs = pd.read_csv(args.runs)
    runs = runs[runs["status"] == "ok"].copy()
    figures = ("throughput", "first-vs-second-epoch", "scale-up", "accuracy", "loss", "modes")
    if runs.empty:
        for name in figures:
            no_data(args.outdir / f"{name}.png", "no successful MNIST run")
        return
    models = [m for m in ("small", "large") if m in set(runs["model"])]

    points = pd.read_csv(args.points)
    interval_plot(points, point_label(points, ["model", "duplicate", "batch", "devices", "nodes", "strategy", "mode"]), "mean",
                  "ci_low", "ci_high", args.outdir / "throughput.png",
                  with_numerics("MNIST: which framework trains fastest? (steady images/s)", runs),
                  "images/s in steady units (dot: mean of the repeats, bar: hierarchical bootstrap interval)")

    convergence = pd.read_csv(args.convergence)
    loss_curves(convergence, pd.read_csv(args.units), args.outdir / "loss.png",
                "MNIST: do the frameworks' training losses follow one another?")
    epochs = convergence[(convergence["status"] == "ok") & convergence["segment"].isin([1, 2])].copy()
    epochs["run"] = (label(epochs) + " x" + epochs["devices"].astype(str) + epochs["nodes"].map(lambda n: f" on {n} nodes" if n > 1 else "")
                     + " (" + epochs["duplicate"].map("duplicate {}".format) + ")")
    epochs["epoch"] = epochs["segment"].map({1: "first", 2: "second"})
    grid = sns.catplot(data=epochs.sort_values(["framework", "devices"]), y="run", x="wall_s", hue="epoch",
                       col="model", col_order=models, kind="bar", errorbar=REPEATS_RANGE, palette=NOT_FRAMEWORK_PALETTE,
                       sharex=False, sharey=False,
                       height=max(3.5, 0.3 * epochs["run"].nunique()), aspect=1.3,
                       legend_out=False)  # outside, long run names leave it no room
    grid.set(xlabel=f"epoch wall time (s): {REPEATS_RANGE_NOTE}", ylabel="")
    save(grid, args.outdir / "first-vs-second-epoch.png",
         with_numerics("MNIST: how much longer is the first epoch than the second? (wall time)", runs))

    ratios = pd.read_csv(args.ratios)
    scale = ratios[ratios["comparison"].astype(str).str.contains("devices|nodes")].reset_index(drop=True)
    names = scale["framework"].astype(str) + " " + scale["comparison"].astype(str) + " " + point_label(
        scale.assign(framework=""), ["model", "duplicate", "batch", "mode"]).str.strip()
    interval_plot(scale, names, "ratio", "ci_low", "ci_high", args.outdir / "scale-up.png",
                  with_numerics("MNIST: how much faster is training on N devices (or nodes) than on one? "
                                "(throughput ratio)", runs),
                  "ratio: throughput on N / on 1 device (or node); dot: mean, bar: bootstrap interval",
                  reference=1, reference_label="dotted: 1, no gain")
    precision_figure(ratios, runs, args.outdir / "precision.png",
                     f"MNIST: what does mixed precision buy each framework? (throughput ratio)")
    modes_figure(ratios, runs, args.outdir / "modes.png",
                 with_numerics("MNIST: how much faster is each execution mode than its framework's default? "
                               "(throughput ratio)", runs))

    runs = convergence_runs(runs)  # the accuracy after the convergence epochs: the repeats that trained them
    runs["run"] = label(runs)
    grid = sns.catplot(data=runs, y="run", x="final_test_accuracy", col="model", col_order=models, kind="bar",
                       hue="framework", palette=palette(runs["framework"].unique()), dodge=False, legend=False,
                       errorbar=REPEATS_RANGE, height=3.5, aspect=1.3)
    grid.set(xlabel=f"test accuracy (fraction) after the convergence epochs\n{REPEATS_RANGE_NOTE}", ylabel="",
             xlim=(0, 1))
    save(grid, args.outdir / "accuracy.png", "MNIST: do the frameworks reach the same test accuracy?")


if __name__ == "__main__":
    main()
