"""The memory pass's tables and figures: peak memory per framework, workload, mode and batch (the
training process's ru_maxrss, and the process tree's sampled PSS), the memory a sample adds
(the line between the smallest and largest batch), DenseNet-121's largest batch under the limit
per framework and mode, and what the memory-saving modes save against the throughput their
timed runs lose."""
import argparse
import json
import re
from pathlib import Path

import pandas as pd
import seaborn as sns

from dlbench.plots import NOT_FRAMEWORK_PALETTE, REPEATS_RANGE, no_data, palette, save

MIB = 2 ** 20
SAVING = {"pytorch": "checkpoint", "tensorflow": "recompute"}  # dlbench.frameworks.RECOMPUTING (report env)


def batch_of(run_id):
    return int(re.search(r"(?:^|_)batch~(\d+)", run_id).group(1))


def successful(runs):
    """The successful runs with their workload (less -memory), batch, and peak RSS and PSS in MiB."""
    ok = runs[runs["status"] == "ok"].copy()
    if ok.empty:  # its columns may be missing too
        return ok
    ok["workload"] = ok["run_set"].str.removesuffix("-memory")
    if "mode" not in ok:  # a workload with no modes (its points name none)
        ok["mode"] = None
    ok["batch"] = ok["run_id"].map(batch_of)
    ok["rss"], ok["pss"] = ok["peak_rss_bytes"] / MIB, ok["peak_pss_bytes"] / MIB
    return ok


def peaks(runs):
    """One row per point: the median over repeats of each run's peak RSS and PSS (MiB), their range."""
    ok = successful(runs)
    columns = ["workload", "framework", "mode", "batch", "repeats", "peak_rss_mib", "peak_rss_min_mib",
               "peak_rss_max_mib", "peak_pss_mib", "parameters", "mib_per_sample"]
    if ok.empty:
        return pd.DataFrame(columns=columns)
    keys = ["workload", "framework", "mode", "batch"]
    table = ok.groupby(keys, dropna=False).agg(
        repeats=("rss", "size"), peak_rss_mib=("rss", "median"), peak_rss_min_mib=("rss", "min"),
        peak_rss_max_mib=("rss", "max"), peak_pss_mib=("pss", "median"), parameters=("parameters", "first"),
    ).reset_index()

    def per_sample(group):  # the line between the smallest and the largest batch measured
        first, last = group.iloc[0], group.iloc[-1]
        slope = (last["peak_rss_mib"] - first["peak_rss_mib"]) / (last["batch"] - first["batch"]) \
            if last["batch"] > first["batch"] else float("nan")
        return pd.Series(slope, index=group.index)

    table = table.sort_values(keys, ignore_index=True)
    table["mib_per_sample"] = table.groupby(keys[:3], dropna=False, group_keys=False)[["batch", "peak_rss_mib"]] \
        .apply(per_sample)
    return table[columns]


def largest(summaries):
    rows = []
    for path in summaries:
        s = json.loads(Path(path).read_text())
        blocks = s["model"]["blocks"]
        rows.append({"framework": s["framework"], "mode": s["mode"],
                     "model": f"DenseNet-{2 * sum(blocks) + len(blocks) + 1}", "limit_mb": s["limit_mb"],
                     "status": s["status"], "largest_batch": s["largest_batch"], "capped": s["capped"],
                     "complete": s["complete"],
                     "peak_rss_mib": None if s["peak_rss_bytes"] is None else s["peak_rss_bytes"] / MIB,
                     "trials": " ".join(f"{t['batch']}:{'fits' if t['fits'] else 'over'}" for t in s["trials"]),
                     "reason": s["reason"]})
    return pd.DataFrame(rows, columns=["framework", "mode", "model", "limit_mb", "status", "largest_batch", "capped",
                                       "complete", "peak_rss_mib", "trials", "reason"])


def saving(peak_table, largest_table, timed, searched):
    """Each memory-saving mode against its framework's default mode: peak RSS at each batch of the
    searched workload's memory runs (ChestX-ray's), the largest batch under the limit, the timed
    runs' throughput."""
    rows = []
    chest = peak_table[peak_table["workload"] == searched]
    for framework, mode in SAVING.items():
        modes = set(chest.loc[chest["framework"] == framework, "mode"])
        if mode not in modes:
            continue
        default = next(m for m in chest.loc[chest["framework"] == framework, "mode"] if m != mode)
        mine = chest[(chest["framework"] == framework)]
        for batch, group in mine.groupby("batch"):
            by_mode = group.set_index("mode")["peak_rss_mib"]
            if mode not in by_mode or default not in by_mode:
                continue
            row = {"framework": framework, "mode": mode, "default_mode": default, "batch": batch,
                   "peak_rss_mib": by_mode[mode], "default_peak_rss_mib": by_mode[default],
                   "saved_mib": by_mode[default] - by_mode[mode],
                   "saved_fraction": (by_mode[default] - by_mode[mode]) / by_mode[default]}
            for label, m in (("", mode), ("default_", default)):
                found = largest_table[(largest_table["framework"] == framework) & (largest_table["mode"] == m)]
                row[f"{label}largest_batch"] = found["largest_batch"].iloc[0] if len(found) else None
                speed = timed[(timed["framework"] == framework) & (timed["mode"] == m)] if len(timed) else timed
                row[f"{label}samples_per_s"] = speed["median"].iloc[0] if len(speed) else None
                row[f"{label}samples_per_s_ci"] = (f"{speed['ci_low'].iloc[0]:.4g}-{speed['ci_high'].iloc[0]:.4g}"
                                                   if len(speed) and pd.notna(speed["ci_low"].iloc[0]) else None)
            row["throughput_lost_fraction"] = (1 - row["samples_per_s"] / row["default_samples_per_s"]
                                               if row["samples_per_s"] and row["default_samples_per_s"] else None)
            rows.append(row)
    return pd.DataFrame(rows, columns=[
        "framework", "mode", "default_mode", "batch", "peak_rss_mib", "default_peak_rss_mib", "saved_mib",
        "saved_fraction", "largest_batch", "samples_per_s", "samples_per_s_ci", "default_largest_batch",
        "default_samples_per_s", "default_samples_per_s_ci", "throughput_lost_fraction"])


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", nargs="*", default=[], help="the memory run sets' runs tables")
    parser.add_argument("--searches", nargs="*", default=[], help="the largest-batch searches' summaries")
    parser.add_argument("--timed", nargs="*", default=[], help="the searched workload's points table (the timed runs)")
    parser.add_argument("--searched", help="the workload whose big model the search grows (ChestX-ray), if any")
    parser.add_argument("--limit-mb", type=int, required=True)
    parser.add_argument("--outdir", required=True, type=Path)
    parser.add_argument("--peaks", required=True, type=Path)
    parser.add_argument("--largest", required=True, type=Path)
    parser.add_argument("--saving", required=True, type=Path)
    args = parser.parse_args()
    args.outdir.mkdir(parents=True, exist_ok=True)
    runs = [frame for frame in map(pd.read_csv, args.runs) if len(frame)]
    runs = pd.concat(runs, ignore_index=True) if runs else pd.DataFrame(columns=["status"])
    peak_table = peaks(runs)
    largest_table = largest(args.searches)
    timed = pd.concat(map(pd.read_csv, args.timed), ignore_index=True) if args.timed else pd.DataFrame()
    peak_table.to_csv(args.peaks, index=False)
    largest_table.to_csv(args.largest, index=False)
    saving(peak_table, largest_table, timed, args.searched).to_csv(args.saving, index=False)

    if peak_table.empty:
        no_data(args.outdir / "peak-memory.png", "no successful memory run")
    else:
        ok = successful(runs)
        # a panel per workload, under one another, each with only its own runs; its batches (the workloads' differ)
        # named in its title and drawn light (smallest) to dark
        batches = ok.groupby("workload")["batch"].unique().map(sorted)
        frame = ok.assign(run=ok["framework"] + " (" + ok["mode"].astype(str) + ")",
                          panel=ok["workload"].map(
                              lambda w: f"{w}: batch {', '.join(map(str, batches[w]))}, light to dark"),
                          size_rank=ok.groupby("workload")["batch"].rank(method="dense").astype(int))
        grid = sns.catplot(frame, kind="bar", x="rss", y="run", hue="size_rank", row="panel", estimator="median",
                           errorbar=REPEATS_RANGE, sharex=False, sharey=False, palette=NOT_FRAMEWORK_PALETTE,
                           legend=False,
                           height=0.3 * frame.groupby("workload")["run"].nunique().max() + 1.5, aspect=2.2)
        grid.set_titles(row_template="{row_name}")
        grid.set_axis_labels("peak RSS of the training process (MiB)\nbar: median of the repeats, line: their range",
                             "")
        save(grid, args.outdir / "peak-memory.png",
             "How much memory does each framework need to train? (peak RSS by batch; memory pass, not timed)")
    done = largest_table.dropna(subset=["largest_batch"])
    if done.empty:
        no_data(args.outdir / "largest-batch.png", "no largest-batch search ran")
    else:
        frame = done.assign(run=done["framework"] + " (" + done["mode"].astype(str) + ")")
        grid = sns.catplot(frame, kind="bar", x="largest_batch", y="run", hue="framework", dodge=False, legend=False,
                           palette=palette(frame["framework"].unique()), height=0.35 * len(frame) + 1.5, aspect=1.6)
        grid.set_axis_labels(f"largest batch (samples) whose peak RSS fits {args.limit_mb} MiB", "")
        save(grid, args.outdir / "largest-batch.png",
             f"{frame['model'].iloc[0]}: how large a batch fits in {args.limit_mb} MiB, per framework and mode?")


if __name__ == "__main__":
    main()
