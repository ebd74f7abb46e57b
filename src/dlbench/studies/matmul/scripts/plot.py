"""How close each framework gets to the machine: the float32 matrix product's FLOP/s per
framework (the best is the machine's attainable peak), and every training point's model FLOP
utilisation against that peak (its throughput times the FLOPs of a sample, counted once for
every framework: src/dlbench/flops.py), with the points' bootstrap intervals; the frameworks
ranked per run set by their best point."""
import argparse
import os
from pathlib import Path

import pandas as pd

from dlbench.plots import interval_plot, no_data

GIGA = 1e9


def point_columns(points):
    """The sweep point's columns of a points table: between framework and repeats."""
    columns = list(points.columns)
    return columns[columns.index("framework") + 1:columns.index("repeats")]


def described(points):
    """Each point as text: key=value of its point columns."""
    keys = point_columns(points)
    return points[keys].apply(lambda row: " ".join(f"{k}={v}" for k, v in row.items() if pd.notna(v)), axis=1)


def with_flops(points, runs):
    """The points with their FLOP/s and interval: throughput (samples/s) times the runs' FLOPs of a sample."""
    keys = ["run_set", "framework", *point_columns(points)]
    flops = runs.dropna(subset=["sample_flops"]).groupby(keys, dropna=False)["sample_flops"].first()
    frame = points.merge(flops.reset_index(), on=keys, how="inner")
    for column, source in (("flop_s", "mean"), ("flop_s_low", "ci_low"), ("flop_s_high", "ci_high")):
        frame[column] = frame[source] * frame["sample_flops"]
    frame["point"] = described(frame)
    return frame


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", required=True, help="the matmul runs table")
    parser.add_argument("--points", required=True, help="the matmul points table")
    parser.add_argument("--counted-runs", nargs="*", default=[], help="runs tables of run sets that count FLOPs")
    parser.add_argument("--counted-points", nargs="*", default=[], help="their points tables, in the same order")
    parser.add_argument("--outdir", required=True, type=Path)
    parser.add_argument("--table", required=True, type=Path)
    args = parser.parse_args()
    args.outdir.mkdir(parents=True, exist_ok=True)

    peak = pd.read_csv(args.points)
    columns = ["run_set", "framework", "point", "sample_flops", "flop_s", "flop_s_low", "flop_s_high", "mfu",
               "mfu_low", "mfu_high", "rank", "peak_flop_s", "peak_framework", "unstable", "below_minimum", "contended"]
    if peak.empty:
        no_data(args.outdir / "peak.png", "no successful matrix product run")
        no_data(args.outdir / "mfu.png", "no peak measured: no model FLOP utilisation")
        pd.DataFrame(columns=columns).to_csv(args.table, index=False)
        return
    peak = with_flops(peak, pd.read_csv(args.runs))
    best = peak.loc[peak["flop_s"].idxmax()]
    giga = peak[["flop_s", "flop_s_low", "flop_s_high"]] / GIGA
    interval_plot(peak.assign(**giga), peak["framework"] + " " + peak["point"], "flop_s", "flop_s_low", "flop_s_high",
                  args.outdir / "peak.png",
                  "How close does each framework get to the machine's peak? (float32 matrix product)",
                  "GFLOP/s (dot: mean of the repeats, bar: hierarchical bootstrap interval)")

    counted = [with_flops(pd.read_csv(p), pd.read_csv(r)) for r, p in zip(args.counted_runs, args.counted_points)]
    counted = [frame for frame in counted if len(frame)]
    mfu = pd.concat(counted, ignore_index=True) if counted else pd.DataFrame(columns=columns)
    for column, source in (("mfu", "flop_s"), ("mfu_low", "flop_s_low"), ("mfu_high", "flop_s_high")):
        mfu[column] = mfu[source] / best["flop_s"]
    mfu["peak_flop_s"], mfu["peak_framework"] = best["flop_s"], best["framework"]
    # each framework's best point per run set, ranked
    mfu["rank"] = mfu.groupby("run_set")["mfu"].rank(method="min", ascending=False).astype("Int64")
    mfu = mfu.sort_values(["run_set", "mfu"], ascending=[True, False])[columns]
    tmp = args.table.with_name(args.table.name + ".tmp")
    mfu.to_csv(tmp, index=False)
    os.replace(tmp, args.table)

    leaders = mfu.loc[mfu.groupby(["run_set", "framework"])["mfu"].idxmax()] if len(mfu) else mfu
    leaders = leaders.sort_values(["run_set", "mfu"], ascending=[True, False]).reset_index(drop=True)
    interval_plot(leaders, leaders["run_set"] + ": " + leaders["framework"] + " " + leaders["point"], "mfu", "mfu_low",
                  "mfu_high", args.outdir / "mfu.png",
                  f"How much of the machine's peak does each framework's training use? (best point per run set, "
                  f"peak {best['flop_s'] / GIGA:.0f} GFLOP/s: {best['framework']}'s matrix product)",
                  "model FLOP utilisation: fraction of the peak (dot: mean, bar: bootstrap interval)")


if __name__ == "__main__":
    main()
