"""How close each framework gets to the machine: the matrix product's FLOP/s per framework and
precision (the best of those that computed in a precision is the machine's attainable peak in it),
and every training point's model FLOP utilisation against the peak of the precision it computed in
(`peak_of`: its runs' measured precision, dlbench.precision, not the one asked for: a "bfloat16" run
that XLA computed in float32 is held against float32's peak), its throughput times the FLOPs of a
sample (counted once for every framework: src/dlbench/flops.py), with the points' bootstrap
intervals; the frameworks ranked per run set by their best point."""
import argparse
import os
from pathlib import Path

import pandas as pd

from dlbench import precision
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
    """The points with their FLOP/s and interval: throughput (samples/s) times the runs' FLOPs of a
    sample; and the precision they computed in (`measured_precision`)."""
    keys = ["run_set", "framework", *point_columns(points)]
    flops = runs.dropna(subset=["sample_flops"]).groupby(keys, dropna=False)["sample_flops"].first()
    frame = points.merge(flops.reset_index(), on=keys, how="inner")
    frame = frame.merge(measured_precision(runs, keys), on=keys, how="left")
    for column, source in (("flop_s", "mean"), ("flop_s_low", "ci_low"), ("flop_s_high", "ci_high")):
        frame[column] = frame[source] * frame["sample_flops"]
    frame["point"] = described(frame)
    return frame


def measured_precision(runs, keys):
    """Per point: the precision its successful runs computed in (the records' measured precision,
    the runs table's precision_measured, the most common of its runs'; float32 for a run of a run
    set without precisions; unknown where a run asked for one and its record measured none), and
    whether every run followed the precision asked for (`precision_followed`; True without
    precisions)."""
    ok = runs[runs["status"] == "ok"] if "status" in runs else runs
    nothing = pd.Series(None, index=ok.index, dtype=object)
    measured = ok["precision_measured"] if "precision_measured" in ok else nothing
    asked = ok["precision"] if "precision" in ok else nothing
    followed = ok["precision_followed"] if "precision_followed" in ok else nothing
    frame = ok[keys].assign(precision_measured=measured.where(measured.notna() | asked.notna(), precision.DEFAULT),
                            precision_followed=followed.map(lambda v: True if pd.isna(v) else bool(v)))
    return frame.groupby(keys, dropna=False).agg(
        precision_measured=("precision_measured", lambda s: s.mode().iloc[0] if s.notna().any() else None),
        precision_followed=("precision_followed", "all")).reset_index()


def peaks(peak):
    """The machine's peak per precision: {measured precision: its best point} over the products
    that followed the precision asked for (a "bfloat16" product computed in float32 is neither
    bfloat16's peak nor float32's)."""
    peak = peak[peak["precision_followed"] & peak["precision_measured"].notna()]
    return {policy: peak.loc[rows["flop_s"].idxmax()] for policy, rows in peak.groupby("precision_measured")}


def peak_of(measured, best):
    """The peak a point computed in `measured` is held against: the best product of that precision
    (a row of `peaks`), None where no product of it ran (then no utilisation: never another
    precision's peak)."""
    return best.get(measured if isinstance(measured, str) else precision.DEFAULT)


def peak_label(policy):
    """'float32', 'bfloat16': the peak's precision as the figures name it."""
    return precision.COMPUTE_DTYPE.get(policy, str(policy))


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
               "mfu_low", "mfu_high", "rank", "precision_measured", "peak_precision", "peak_flop_s", "peak_framework",
               "unstable", "below_minimum", "contended"]
    if peak.empty:
        no_data(args.outdir / "peak.png", "no successful matrix product run")
        no_data(args.outdir / "mfu.png", "no peak measured: no model FLOP utilisation")
        pd.DataFrame(columns=columns).to_csv(args.table, index=False)
        return
    peak = with_flops(peak, pd.read_csv(args.runs))
    best = peaks(peak)
    giga = peak[["flop_s", "flop_s_low", "flop_s_high"]] / GIGA
    computed = peak["precision_measured"].map(peak_label, na_action="ignore").fillna("?")
    interval_plot(peak.assign(**giga), peak["framework"] + " " + peak["point"] + " (computed in " + computed + ")",
                  "flop_s", "flop_s_low", "flop_s_high", args.outdir / "peak.png",
                  "How close does each framework get to the machine's peak? (matrix product, per precision)",
                  "GFLOP/s (dot: mean of the repeats, bar: hierarchical bootstrap interval)")

    counted = [with_flops(pd.read_csv(p), pd.read_csv(r)) for r, p in zip(args.counted_runs, args.counted_points)]
    counted = [frame for frame in counted if len(frame)]
    mfu = pd.concat(counted, ignore_index=True) if counted else pd.DataFrame(columns=columns)
    held = [peak_of(m, best) for m in mfu["precision_measured"]] if len(mfu) else []
    mfu["peak_precision"] = [None if p is None else p["precision_measured"] for p in held]
    mfu["peak_flop_s"] = [float("nan") if p is None else p["flop_s"] for p in held]
    mfu["peak_framework"] = [None if p is None else p["framework"] for p in held]
    for column, source in (("mfu", "flop_s"), ("mfu_low", "flop_s_low"), ("mfu_high", "flop_s_high")):
        mfu[column] = mfu[source] / mfu["peak_flop_s"]
    # each framework's best point per run set, ranked
    mfu["rank"] = mfu.groupby("run_set")["mfu"].rank(method="min", ascending=False).astype("Int64")
    mfu = mfu.sort_values(["run_set", "mfu"], ascending=[True, False])[columns]
    tmp = args.table.with_name(args.table.name + ".tmp")
    mfu.to_csv(tmp, index=False)
    os.replace(tmp, args.table)

    rated = mfu.dropna(subset=["mfu"])
    # each framework's best point per run set and precision computed in
    leaders = rated.loc[rated.groupby(["run_set", "framework", "peak_precision"])["mfu"].idxmax()] if len(rated) else rated
    leaders = leaders.sort_values(["run_set", "mfu"], ascending=[True, False]).reset_index(drop=True)
    against = leaders["peak_precision"].map(peak_label) if len(leaders) else leaders["peak_precision"]
    interval_plot(leaders, leaders["run_set"] + ": " + leaders["framework"] + " " + leaders["point"]
                  + " (against the " + against.astype(str) + " peak)", "mfu", "mfu_low",
                  "mfu_high", args.outdir / "mfu.png",
                  "How much of the machine's peak does each framework's training use? (best point per run set, "
                  "each against the peak of the precision it computed in: " + peaks_text(best) + ")",
                  "model FLOP utilisation: fraction of the peak (dot: mean, bar: bootstrap interval)")


def peaks_text(best):
    """'float32 347 GFLOP/s (pytorch), bfloat16 1,050 GFLOP/s (pytorch)': the peaks, named."""
    return ", ".join(f"{peak_label(policy)} {row['flop_s'] / GIGA:,.0f} GFLOP/s ({row['framework']})"
                     for policy, row in sorted(best.items(), key=lambda item: precision.POLICIES.index(item[0])
                                               if item[0] in precision.POLICIES else 99))


if __name__ == "__main__":
    main()
