"""The Borealis AI study's table and figures from the IMDB runs, convergence, units, points
and ratios tables; throughput and the sparse speed-up as means of the repeats with their bootstrap
intervals; every framework's loss by step from the shared start."""
import argparse
from pathlib import Path

import pandas as pd
import seaborn as sns

from dlbench.plots import interval_plot, loss_curves, modes_figure, no_data, point_label, save, with_numerics

FIGURES = ("epoch-time", "convergence", "accuracy", "sparse-speedup", "modes")


def epoch_time_table(runs):
    """The study's table: mean epoch time by batch size and workers (an epoch of the training
    set at the steady seconds per step: warm-up and compilation left out)."""
    table = runs.pivot_table(index=["framework", "grad", "batch"], columns="workers", values="epoch_s",
                             aggfunc="mean")
    table.columns = [f"workers {w} (s)" for w in table.columns]
    return table.reset_index()


def nearest(values, target):
    return min(values, key=lambda v: (abs(v - target), v))


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", required=True)
    parser.add_argument("--convergence", required=True)
    parser.add_argument("--units", required=True)
    parser.add_argument("--points", required=True)
    parser.add_argument("--ratios", required=True)
    parser.add_argument("--outdir", required=True, type=Path)
    parser.add_argument("--table", required=True, help="the epoch-time table (CSV)")
    parser.add_argument("--convergence-batch", type=int, default=256)
    args = parser.parse_args()
    args.outdir.mkdir(parents=True, exist_ok=True)
    runs = pd.read_csv(args.runs)
    runs = runs[runs["status"] == "ok"].copy()
    epoch_time_table(runs).to_csv(args.table, index=False)
    if runs.empty:
        for name in FIGURES:
            no_data(args.outdir / f"{name}.png", "no successful IMDB run")
        return
    runs["run"] = runs["framework"] + "/" + runs["grad"] + " " + runs["mode"]

    points = pd.read_csv(args.points)
    interval_plot(points, point_label(points, ["batch", "workers", "grad", "mode"]), "mean", "ci_low", "ci_high",
                  args.outdir / "epoch-time.png",
                  with_numerics("IMDB LSTM: training throughput by batch size and loader workers", runs),
                  "reviews/s, steady units: mean of the repeats and hierarchical bootstrap interval")

    convergence, units = pd.read_csv(args.convergence), pd.read_csv(args.units)
    batch = nearest(sorted(runs["batch"].unique()), args.convergence_batch)

    def curves(frame):
        return frame[(frame["batch"] == batch) & (frame["workers"] == runs["workers"].min()) & (frame["grad"] == "dense")]

    loss_curves(curves(convergence), curves(units), args.outdir / "convergence.png",
                f"IMDB LSTM: training loss by step at batch {batch}, dense gradients")

    grid = sns.catplot(data=runs, y="run", x="final_test_accuracy", hue="batch", kind="bar", errorbar="sd",
                       palette="crest", height=3.5, aspect=1.4)
    grid.set(xlabel="test accuracy after the convergence steps", ylabel="", xlim=(0, 1))
    save(grid, args.outdir / "accuracy.png", "IMDB LSTM: test accuracy")

    ratios = pd.read_csv(args.ratios)
    sparse = ratios[ratios["comparison"].astype(str).str.contains("sparse")].reset_index(drop=True)
    interval_plot(sparse, sparse["framework"].astype(str) + " " + point_label(sparse.assign(framework=""), ["batch", "workers", "mode"]),
                  "ratio", "ci_low", "ci_high", args.outdir / "sparse-speedup.png",
                  with_numerics("PyTorch: speed-up of sparse embedding gradients", runs),
                  "throughput sparse / dense (interval)", reference=1)
    modes_figure(ratios, runs, args.outdir / "modes.png", with_numerics("IMDB LSTM: what each execution mode buys", runs))


if __name__ == "__main__":
    main()
