"""A workload's other model against its own on the same data, framework by framework (IMDB's
Transformer, run set imdb-transformer, against its LSTM, imdb): at every point both ran (the same
batch, workers, mode and precision; a key only one of them has at its baseline, as the headline's
ratios hold it: the LSTM's dense embedding gradients), the other model's steady throughput over the
own model's, and its time to the workload's accuracy target over the own model's where both reach
it, each with its interval. Writes results/tables/findings-models.csv and its figure; the first
view (summary.py) says it, beside the framework that trains the other model fastest.

Throughput: each side as its run set's points table gives it (the mean of its repeats' means, with
its interval), and their ratio with the interval every ratio of two points has (dlbench.stats.interval:
each side's hierarchical bootstrap over its processes, then its units), the two run sets' points
lending each other their spread between processes (dlbench.stats.variance_prior, as one run set's
points do). Its verdict is dlbench.stats.verdict's, and none where a side is contended, has short
units or did not follow its precision (dlbench.flags.not_resolved).

Time to the target: the convergence steps until the test metric first reached it (the runs table's
steps_to_target, from the same start and data in every framework: the median of the point's
convergence runs, where every one of them reached it) times the point's steady seconds per step (its
samples per step over its mean throughput): the runs table's time_to_target_s, at the point's
throughput rather than one run's. Its interval is the throughput's (the steps are one trajectory,
not resampled), and the ratio of two times is the ratio of their steps times the inverse of the
throughput ratio, with that ratio's interval.

python models.py --tables-dir results/tables --pairs OTHER:OWN:SAMPLE ... [--confidence 0.95]
    [--resamples 2000] [--seed 0] --table findings-models.csv --figure models.png
"""
import argparse
import os
from pathlib import Path

import numpy as np
import pandas as pd

from dlbench.flags import flags_of, is_set, not_resolved, withdrawing
from dlbench.stats import (DIMENSIONS, FLAGS, NO_DIFFERENCE, ONE_SAMPLE, estimate, interval, plain, point_key,
                           repeats_of, steady_points, variance_prior, verdict, without_set_aside)

# A point key only one side has is held at its baseline, as within a framework the headline holds the
# keys it does not compare (dlbench.stats.DIMENSIONS: the first baseline named for each key)
BASELINES = {}
for _column, _, _baseline, _ in DIMENSIONS:
    BASELINES.setdefault(_column, _baseline)

SIDE = ["samples_per_s", "ci_low", "ci_high", "repeats"]
TIME = ["steps_to_target", "time_to_target_s", "time_ci_low", "time_ci_high"]
LONGER, SHORTER = "longer", "shorter"   # a time ratio's verdict: its interval above or below 1


def at_baseline(column, value, framework):
    """Whether a point key that the other side lacks is at its baseline (or not set)."""
    if pd.isna(value):
        return True
    baseline = BASELINES.get(column)
    return baseline is not None and point_key((value,)) == point_key((baseline(framework),))


def read(folder, name, table):
    path = Path(folder) / f"{name}-{table}.csv"
    return pd.read_csv(path) if path.exists() else pd.DataFrame(columns=["status"])


def points_by_key(points):
    """{point_key(run set, framework, the point's keys): its points table row}."""
    if points.empty or "repeats" not in points:
        return {}
    columns = list(points.columns[:points.columns.get_loc("repeats")])
    return {point_key(tuple(row[c] for c in columns)): row for _, row in points.iterrows()}


def groups_of(units):
    """(the point's key columns, {(run set, framework, *values): its steady units less the set-aside repeats})."""
    if units.empty or "run_id" not in units:
        return [], {}
    keys, groups = steady_points(units)
    return keys[2:], {name: without_set_aside(group) for name, group in groups.items()}


def matched(units, reference_units):
    """The points of a framework both sides ran: (the keys of each side's points, the keys both have,
    [((name, steady units), (reference name, its steady units))], the variance prior of both run sets'
    points). A key only one side has is at its baseline there."""
    keys, groups = groups_of(units)
    reference_keys, reference_groups = groups_of(reference_units)
    shared = [k for k in keys if k in reference_keys]

    def index(own_keys, found):
        points = {}
        for name, group in found.items():
            values = dict(zip(own_keys, name[2:]))
            if all(at_baseline(k, v, name[1]) for k, v in values.items() if k not in shared):
                points[(name[1], point_key([values[k] for k in shared]))] = (name, group)
        return points

    mine, theirs = index(keys, groups), index(reference_keys, reference_groups)
    prior = variance_prior([repeats_of(group) for group in [*groups.values(), *reference_groups.values()]])
    return (keys, reference_keys), shared, [(mine[key], theirs[key]) for key in mine if key in theirs], prior


def target_steps(runs, name, keys):
    """(steps, why not): the median steps to the target of the point's convergence runs where every one
    reached it; else None and why (no target, no convergence run, not reached in N steps)."""
    if "steps_to_target" not in runs or any(k not in runs for k in keys):
        return None, "no accuracy target"
    where = point_key(name[1:])
    mine = runs[[point_key((row["framework"], *(row[k] for k in keys))) == where for _, row in runs.iterrows()]]
    mine = mine[(mine["status"] == "ok") & (mine["segments"].fillna(0) > 0)]
    if mine.empty:
        return None, "no convergence run"
    if not mine["target_reached"].map(is_set).all():
        return None, f"not reached in {plain(mine['convergence_steps'].max())} steps"
    return float(mine["steps_to_target"].astype(float).median()), ""


def side(points, name, group, runs, keys):
    """One side's figures: its throughput with its interval (its points table's), its flags, its time to
    the target with its interval (steps x samples per step / throughput), and why it has none."""
    row = points.get(point_key(name))
    repeats = repeats_of(group)
    mean, low, high = ((row["mean"], row["ci_low"], row["ci_high"]) if row is not None
                       else (estimate(repeats), np.nan, np.nan))
    steps, why = target_steps(runs, name, keys)
    # the samples trained until the target
    work = None if steps is None else steps * group["samples"].sum() / group["steps"].sum()
    time = dict.fromkeys(TIME, np.nan) if work is None else {
        "steps_to_target": steps, "time_to_target_s": work / mean, "time_ci_low": work / high, "time_ci_high": work / low}
    return ({"samples_per_s": mean, "ci_low": low, "ci_high": high, "repeats": len(repeats), **time},
            flags_of(row) if row is not None else [], why, work)


def time_verdict(low, high, flags):
    if withdrawing(flags):
        return not_resolved(flags)
    if pd.isna(low) or pd.isna(high):
        return ONE_SAMPLE
    return LONGER if low > 1 else SHORTER if high < 1 else NO_DIFFERENCE


def compare(other, own, folder, confidence, resamples, seed):
    """The rows of run set `other` against `own`: one per framework and point both ran."""
    units, own_units = read(folder, other, "units"), read(folder, own, "units")
    points = {**points_by_key(read(folder, other, "points")), **points_by_key(read(folder, own, "points"))}
    runs, own_runs = read(folder, other, "runs"), read(folder, own, "runs")
    (keys, own_keys), shared, pairs, prior = matched(units, own_units)
    targets = [t for frame in (runs, own_runs) if "target" in frame for t in frame["target"].dropna()]
    target = targets[0] if targets else ""
    rows = []
    for (name, group), (own_name, own_group) in pairs:
        mine, flags, why, work = side(points, name, group, runs, keys)
        theirs, own_flags, own_why, own_work = side(points, own_name, own_group, own_runs, own_keys)
        flags = [f for f in FLAGS if f in flags or f in own_flags]
        ratio, low, high = interval([repeats_of(group), repeats_of(own_group)], confidence, resamples, seed, prior)
        row = {"run_set": other, "reference": own, "framework": name[1],
               **{k: plain(v) for k, v in zip(keys, name[2:]) if k in shared},
               **{k: mine[k] for k in SIDE}, **{f"reference_{k}": theirs[k] for k in SIDE},
               "ratio": ratio, "ratio_ci_low": low, "ratio_ci_high": high,
               "verdict": not_resolved(flags) if withdrawing(flags) else verdict(low, high), "target": target,
               **{k: mine[k] for k in TIME}, **{f"reference_{k}": theirs[k] for k in TIME}}
        if work is not None and own_work is not None:
            # (work / mine) / (own work / theirs): the steps' ratio over the throughput ratio
            steps = work / own_work
            row.update(time_ratio=steps / ratio, time_ratio_ci_low=steps / high, time_ratio_ci_high=steps / low,
                       time_verdict=time_verdict(steps / high, steps / low, flags))
        else:
            missing = "; ".join(f"{n}: {w}" for n, w in ((other, why), (own, own_why)) if w)
            row.update(time_ratio=np.nan, time_ratio_ci_low=np.nan, time_ratio_ci_high=np.nan, time_verdict=missing)
        rows.append({**row, **{f: f in flags for f in FLAGS}})
    return shared, rows


def columns(shared):
    return ["run_set", "reference", "framework", *shared, *SIDE, *(f"reference_{k}" for k in SIDE), "ratio",
            "ratio_ci_low", "ratio_ci_high", "verdict", "target", *TIME, *(f"reference_{k}" for k in TIME),
            "time_ratio", "time_ratio_ci_low", "time_ratio_ci_high", "time_verdict", *FLAGS]


def figure(table, pairs, path):
    """Each framework's other model over its own at each point both ran: steady throughput, and speed to
    the target (the inverse of the time ratio), each with its interval; above 1 the other model is
    faster. Marks as every figure's (dlbench.plots)."""
    from dlbench.plots import interval_plot

    title = "; ".join(f"{other} against {own}" for other, own, _ in pairs) or "no model beside a workload's own"
    keys = [c for c in table.columns[table.columns.get_loc("framework") + 1:table.columns.get_loc("samples_per_s")]
            if table[c].nunique() > 1]
    if len(pairs) > 1:
        keys = ["run_set", *keys]
    entries = []
    for _, r in table.iterrows():
        where = " ".join(f"{k}={plain(r[k])}" for k in keys if pd.notna(r[k]))
        label = f"{r['framework']}{' ' + where if where else ''}"
        flags = {f: r[f] for f in FLAGS}
        entries.append({"framework": r["framework"], "label": f"{label}: throughput", "value": r["ratio"],
                        "low": r["ratio_ci_low"], "high": r["ratio_ci_high"], **flags})
        if pd.notna(r["time_ratio"]):
            entries.append({"framework": r["framework"], "label": f"{label}: to the target", "value": 1 / r["time_ratio"],
                            "low": 1 / r["time_ratio_ci_high"], "high": 1 / r["time_ratio_ci_low"], **flags})
    frame = pd.DataFrame(entries, columns=["framework", "label", "value", "low", "high", *FLAGS])
    # one repeat a side has no interval: its dot alone
    frame["low"], frame["high"] = frame["low"].fillna(frame["value"]), frame["high"].fillna(frame["value"])
    names = " / ".join(f"{other} over {own}" for other, own, _ in pairs) or "other / own model"
    interval_plot(frame, frame["label"], "value", "low", "high", path,
                  f"{title}: how much faster, framework by framework?",
                  f"{names}: steady throughput, and speed to the target (time's inverse); 95% interval; "
                  f"1, dotted: as fast", reference=1)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tables-dir", required=True, type=Path, help="results/tables")
    parser.add_argument("--pairs", nargs="*", default=[], help="OTHER:OWN:SAMPLE run sets, the other model first")
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0, help="of the bootstrap")
    parser.add_argument("--table", required=True, type=Path)
    parser.add_argument("--figure", required=True, type=Path)
    args = parser.parse_args()
    pairs = [tuple(pair.split(":")) for pair in args.pairs]
    shared, rows = [], []
    for other, own, _ in pairs:
        keys, found = compare(other, own, args.tables_dir, args.confidence, args.resamples, args.seed)
        shared += [k for k in keys if k not in shared]
        rows += found
    table = pd.DataFrame(rows, columns=columns(shared))
    args.table.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.table.with_name(args.table.name + ".tmp")
    table.to_csv(tmp, index=False)
    os.replace(tmp, args.table)
    args.figure.parent.mkdir(parents=True, exist_ok=True)
    figure(table, pairs, args.figure)
    for _, r in table.iterrows():
        print(f"{r['run_set']} / {r['reference']} {r['framework']}: throughput {r['ratio']:.3g} ({r['verdict']}), "
              f"time to the target {r['time_ratio']:.3g} ({r['time_verdict']})")


if __name__ == "__main__":
    main()
