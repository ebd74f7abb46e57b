"""The memory pass's tables and figures: peak memory per framework, model, mode and batch (the
training process's ru_maxrss, and the process tree's sampled PSS) with the interval of its mean
over the point's processes, the memory a sample adds (the line between the smallest and largest
batch), the ratios of peaks with their intervals (frameworks side by side, each mode against its
framework's default: the survey's memory claims read them), DenseNet-121's largest batch under
the limit per framework and mode, and what the memory-saving modes save against the throughput
their timed runs lose.

A model is its training run set (the memory run set less -memory), in the tables' `workload` column:
a workload's own model (mnist, imdb, chestxray) or another it trains on the same data
(imdb-transformer, IMDB's Transformer), each its own panel and its own ratios.

A peak is one number per process: the process is the sample, as for throughput (dlbench.stats),
so a point's interval and a ratio's come from the bootstrap over its processes (each run's peak a
repeat of one unit: dlbench.stats.interval, Student's t, the points lending each other their
spread between processes: dlbench.stats.variance_prior). One process a side has no interval."""
import argparse
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import seaborn as sns

from dlbench.frameworks import FRAMEWORKS
from dlbench.plots import NOT_FRAMEWORK_PALETTE, REPEATS_RANGE, no_data, palette, save
from dlbench.stats import NO_DIFFERENCE, ONE_SAMPLE, interval, variance_prior

MIB = 2 ** 20
CONFIDENCE, RESAMPLES = 0.95, 2000   # dlbench.stats' defaults, as for throughput
LESS, MORE = "less memory", "more memory"   # a ratio's verdict: its interval below or above 1
SAVING = {"pytorch": "checkpoint", "tensorflow": "recompute"}  # dlbench.frameworks.RECOMPUTING (report env)


def batch_of(run_id):
    return int(re.search(r"(?:^|_)batch~(\d+)", run_id).group(1))


def successful(runs):
    """The successful runs with their model (`workload`: the memory run set less -memory, e.g. imdb or
    imdb-transformer), batch, and peak RSS and PSS in MiB."""
    ok = runs[runs["status"] == "ok"].copy()
    if ok.empty:  # its columns may be missing too
        return ok
    ok["workload"] = ok["run_set"].str.removesuffix("-memory")
    if "mode" not in ok:  # a workload with no modes (its points name none)
        ok["mode"] = None
    ok["batch"] = ok["run_id"].map(batch_of)
    ok["rss"], ok["pss"] = ok["peak_rss_bytes"] / MIB, ok["peak_pss_bytes"] / MIB
    return ok


KEYS = ["workload", "framework", "mode", "batch"]


def samples(ok):
    """{point (KEYS): its processes' peak RSS (MiB), each a repeat of one unit (dlbench.stats' shape)}."""
    return {point: [np.array([value]) for value in group["rss"]]
            for point, group in ok.groupby(KEYS, dropna=False, sort=False)}


def prior(points):
    """What the points say together of the spread between processes (dlbench.stats.variance_prior)."""
    return variance_prior(list(points.values()))


def peaks(runs):
    """One row per point: the median over repeats of each run's peak RSS and PSS (MiB), their range,
    and the mean peak RSS with its interval over the point's processes (none from one process)."""
    ok = successful(runs)
    columns = ["workload", "framework", "mode", "batch", "repeats", "peak_rss_mib", "peak_rss_min_mib",
               "peak_rss_max_mib", "peak_rss_mean_mib", "peak_rss_ci_low_mib", "peak_rss_ci_high_mib", "peak_pss_mib",
               "parameters", "mib_per_sample"]
    if ok.empty:
        return pd.DataFrame(columns=columns)
    keys = KEYS
    table = ok.groupby(keys, dropna=False).agg(
        repeats=("rss", "size"), peak_rss_mib=("rss", "median"), peak_rss_min_mib=("rss", "min"),
        peak_rss_max_mib=("rss", "max"), peak_pss_mib=("pss", "median"), parameters=("parameters", "first"),
    ).reset_index()
    points = samples(ok)
    spread = prior(points)
    bounds = {point: interval([repeats], CONFIDENCE, RESAMPLES, 0, spread) for point, repeats in points.items()}
    found = [bounds[next(p for p in points if all(_same(a, b) for a, b in zip(p, r)))]
             for r in table[keys].itertuples(index=False)]
    table["peak_rss_mean_mib"], table["peak_rss_ci_low_mib"], table["peak_rss_ci_high_mib"] = zip(*found)

    def per_sample(group):  # the line between the smallest and the largest batch measured
        first, last = group.iloc[0], group.iloc[-1]
        slope = (last["peak_rss_mib"] - first["peak_rss_mib"]) / (last["batch"] - first["batch"]) \
            if last["batch"] > first["batch"] else float("nan")
        return pd.Series(slope, index=group.index)

    table = table.sort_values(keys, ignore_index=True)
    table["mib_per_sample"] = table.groupby(keys[:3], dropna=False, group_keys=False)[["batch", "peak_rss_mib"]] \
        .apply(per_sample)
    return table[columns]


def _same(a, b):
    return (pd.isna(a) and pd.isna(b)) or a == b


def default_mode(framework, mode):
    """The framework's default mode, or the point has none (a workload without modes)."""
    return pd.isna(mode) or framework not in FRAMEWORKS or mode == FRAMEWORKS[framework].default_mode


def memory_verdict(low, high):
    """A ratio of peaks: less or more memory only when the whole interval says so."""
    if pd.isna(low) or pd.isna(high):
        return ONE_SAMPLE
    return LESS if high < 1 else MORE if low > 1 else NO_DIFFERENCE


RATIO_COLUMNS = ["workload", "comparison", "compared", "numerator", "denominator", "framework", "mode", "batch",
                 "numerator_mib", "denominator_mib", "repeats_numerator", "repeats_denominator", "ratio", "ci_low",
                 "ci_high", "verdict"]


def ratios(runs):
    """The ratios of peak RSS (numerator / denominator: below 1, the numerator needs less), each with
    its interval over both sides' processes (dlbench.stats.interval, the sides resampled
    independently) and a verdict: every pair of frameworks at the same model and batch, each in its
    default mode (the later framework of dlbench.frameworks' order over the earlier), and within a
    framework each other mode over its default one. What a row compares is data beside its text, as in
    the throughput ratios: compared (framework or mode), numerator, denominator."""
    ok = successful(runs)
    if ok.empty:
        return pd.DataFrame(columns=RATIO_COLUMNS)
    points = samples(ok)
    spread = prior(points)
    order = {name: i for i, name in enumerate(FRAMEWORKS)}
    rows = []

    def add(num, den, compared, numerator, denominator, framework, mode, comparison):
        ratio, low, high = interval([points[num], points[den]], CONFIDENCE, RESAMPLES, 0, spread)
        rows.append({"workload": num[0], "comparison": comparison, "compared": compared, "numerator": numerator,
                     "denominator": denominator, "framework": framework, "mode": mode, "batch": num[3],
                     "numerator_mib": float(np.mean([r.mean() for r in points[num]])),
                     "denominator_mib": float(np.mean([r.mean() for r in points[den]])),
                     "repeats_numerator": len(points[num]), "repeats_denominator": len(points[den]),
                     "ratio": ratio, "ci_low": low, "ci_high": high, "verdict": memory_verdict(low, high)})

    defaults = sorted((p for p in points if default_mode(p[1], p[2])), key=lambda p: (p[0], p[3], order.get(p[1], 99)))
    for i, den in enumerate(defaults):
        for num in defaults[i + 1:]:
            if (num[0], num[3]) == (den[0], den[3]) and num[1] != den[1]:
                add(num, den, "framework", num[1], den[1], "", np.nan,
                    f"{num[1]} ({num[2]}) / {den[1]} ({den[2]})" if not pd.isna(num[2]) else f"{num[1]} / {den[1]}")
    for num in points:
        if default_mode(num[1], num[2]):
            continue
        for den in defaults:
            if (den[0], den[1], den[3]) == (num[0], num[1], num[3]):
                add(num, den, "mode", num[2], den[2], num[1], np.nan, f"{num[2]} / {den[2]}")
    return pd.DataFrame(rows, columns=RATIO_COLUMNS)


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
    parser.add_argument("--ratios", type=Path, help="the ratios of peaks with their intervals (memory-ratios.csv)")
    args = parser.parse_args()
    args.outdir.mkdir(parents=True, exist_ok=True)
    runs = [frame for frame in map(pd.read_csv, args.runs) if len(frame)]
    runs = pd.concat(runs, ignore_index=True) if runs else pd.DataFrame(columns=["status"])
    peak_table = peaks(runs)
    largest_table = largest(args.searches)
    timed = pd.concat(map(pd.read_csv, args.timed), ignore_index=True) if args.timed else pd.DataFrame()
    peak_table.to_csv(args.peaks, index=False)
    largest_table.to_csv(args.largest, index=False)
    if args.ratios:
        ratios(runs).to_csv(args.ratios, index=False)
    saving(peak_table, largest_table, timed, args.searched).to_csv(args.saving, index=False)

    if peak_table.empty:
        no_data(args.outdir / "peak-memory.png", "no successful memory run")
    else:
        ok = successful(runs)
        # a panel per model (a workload's, or its other model's), under one another, each with only its own
        # runs; its batches (the workloads' differ) named in its title and drawn light (smallest) to dark
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
