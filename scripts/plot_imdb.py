"""The Borealis AI study's table and figures from the IMDB runs and epochs tables."""
import argparse
from pathlib import Path

import pandas as pd
import seaborn as sns

from dlbench.plots import no_data, save

FIGURES = ("epoch-time", "convergence", "accuracy", "sparse-speedup")


def epoch_time_table(runs):
    """The study's table: mean epoch time (first epoch left out) by batch size and workers."""
    table = runs.pivot_table(index=["framework", "grad", "batch"], columns="workers", values="steady_epoch_s",
                             aggfunc="mean")
    table.columns = [f"workers {w} (s)" for w in table.columns]
    return table.reset_index()


def sparse_speedup(runs):
    """PyTorch: dense steady epoch time over sparse, per batch size and workers."""
    torch = runs[runs["framework"] == "pytorch"]
    keys = ["batch", "workers", "repeat"]
    dense = torch[torch["grad"] == "dense"].set_index(keys)["steady_epoch_s"]
    sparse = torch[torch["grad"] == "sparse"].set_index(keys)["steady_epoch_s"]
    return (dense / sparse).dropna().rename("speedup").reset_index()


def nearest(values, target):
    return min(values, key=lambda v: (abs(v - target), v))


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", required=True)
    parser.add_argument("--epochs", required=True)
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
    runs["run"] = runs["framework"] + "/" + runs["grad"]

    grid = sns.relplot(data=runs, x="batch", y="steady_epoch_s", hue="workers", style="grad", col="framework",
                       kind="line", marker="o", errorbar="sd", palette="viridis", height=3, aspect=1.1)
    grid.set(xscale="log", xticks=sorted(runs["batch"].unique()), xticklabels=sorted(runs["batch"].unique()),
             ylabel="mean epoch time (s), first left out")
    save(grid, args.outdir / "epoch-time.png", "IMDB LSTM: time per epoch by batch size and loader workers")

    epochs = pd.read_csv(args.epochs)
    epochs = epochs[epochs["status"] == "ok"].copy()
    batch = nearest(sorted(epochs["batch"].unique()), args.convergence_batch)
    curves = epochs[(epochs["batch"] == batch) & (epochs["workers"] == epochs["workers"].min())].copy()
    curves["run"] = curves["framework"] + "/" + curves["grad"]
    grid = sns.relplot(data=curves, x="epoch", y="loss", hue="run", kind="line", marker="o", errorbar="sd",
                       height=3.5, aspect=1.4)
    grid.set(xticks=sorted(curves["epoch"].unique()), ylabel="training loss (epoch mean)")
    save(grid, args.outdir / "convergence.png", f"IMDB LSTM: training loss per epoch at batch {batch}")

    grid = sns.catplot(data=runs, y="run", x="final_test_accuracy", hue="batch", kind="bar", errorbar="sd",
                       palette="crest", height=3.5, aspect=1.4)
    grid.set(xlabel="test accuracy after the last epoch", ylabel="", xlim=(0, 1))
    save(grid, args.outdir / "accuracy.png", "IMDB LSTM: test accuracy")

    speedup = sparse_speedup(runs)
    if speedup.empty:
        no_data(args.outdir / "sparse-speedup.png", "no PyTorch run with both dense and sparse gradients")
    else:
        grid = sns.catplot(data=speedup, x="batch", y="speedup", hue="workers", kind="bar", errorbar="sd",
                           palette="viridis", height=3.5, aspect=1.4)
        grid.refline(y=1, color="grey", linestyle=":")
        grid.set(ylabel="dense / sparse epoch time")
        save(grid, args.outdir / "sparse-speedup.png", "PyTorch: speed-up of sparse embedding gradients")


if __name__ == "__main__":
    main()
