"""The Borealis AI study's table and figures from the IMDB runs, convergence, units, points
and ratios tables; throughput and the sparse speed-up as means of the repeats with their bootstrap
intervals; every framework's loss by step from the shared start and its test accuracy, of the
repeats that train the convergence steps (measurement.convergence_repeats)."""
import argparse
from pathlib import Path

import pandas as pd
import seaborn as sns

from dlbench.plots import (NOT_FRAMEWORK_PALETTE, REPEATS_RANGE, REPEATS_RANGE_NOTE, convergence_runs, interval_plot,
                           loss_curves, modes_figure, precision_figure, no_data, point_label, save, with_numerics)

FIGURES = ("epoch-time", "convergence", "accuracy", "sparse-speedup", "modes", "precision")


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
                  with_numerics("IMDB LSTM: which framework trains fastest, by batch size and loader workers? "
                                "(steady reviews/s)", runs),
                  "reviews/s in steady units (dot: mean of the repeats, bar: hierarchical bootstrap interval)")

    convergence, units = pd.read_csv(args.convergence), pd.read_csv(args.units)
    batch = nearest(sorted(runs["batch"].unique()), args.convergence_batch)

    def curves(frame):
        return frame[(frame["batch"] == batch) & (frame["workers"] == runs["workers"].min()) & (frame["grad"] == "dense")]

    loss_curves(curves(convergence), curves(units), args.outdir / "convergence.png",
                f"IMDB LSTM: do the frameworks' training losses follow one another? (batch {batch}, dense gradients)")

    # the accuracy after the convergence steps: the repeats that trained them
    grid = sns.catplot(data=convergence_runs(runs), y="run", x="final_test_accuracy", hue="batch", kind="bar",
                       errorbar=REPEATS_RANGE, palette=NOT_FRAMEWORK_PALETTE, height=3.5, aspect=1.4)
    grid.set(xlabel=f"test accuracy (fraction) after the convergence steps\n{REPEATS_RANGE_NOTE}", ylabel="",
             xlim=(0, 1))
    save(grid, args.outdir / "accuracy.png", "IMDB LSTM: do the frameworks reach the same test accuracy?")

    ratios = pd.read_csv(args.ratios)
    sparse = ratios[ratios["comparison"].astype(str).str.contains("sparse")].reset_index(drop=True)
    names = sparse["framework"].astype(str) + " " + point_label(sparse.assign(framework=""),
                                                               ["batch", "workers", "mode"]).str.strip()
    interval_plot(sparse, names, "ratio", "ci_low", "ci_high", args.outdir / "sparse-speedup.png",
                  with_numerics("IMDB LSTM: do sparse embedding gradients train faster than dense? (throughput ratio)",
                                runs),
                  "ratio: throughput sparse / dense; dot: mean, bar: bootstrap interval",
                  reference=1, reference_label="dotted: 1, no gain")
    precision_figure(ratios, runs, args.outdir / "precision.png",
                     f"IMDB LSTM: what does mixed precision buy each framework? (throughput ratio)")
    modes_figure(ratios, runs, args.outdir / "modes.png",
                 with_numerics("IMDB LSTM: how much faster is each execution mode than its framework's default? "
                               "(throughput ratio)", runs))


if __name__ == "__main__":
    main()
