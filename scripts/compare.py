"""Compare two results folders point by point: new / old steady throughput, with a verdict.

    python scripts/compare.py OLD_RESULTS NEW_RESULTS --csv compare.csv --figure compare.png

Each folder holds tables/*-units.csv (written by the workflow's aggregation). For every point
with steady units in both: the old and new samples/s (the mean of the repeats' means), new /
old with its hierarchical bootstrap interval (repeats, then units within them), widened by the
spread between the two runs measured over all their points (dlbench.stats.between_runs), and a verdict:
"faster" or "slower" only when the whole interval lies beyond 1 +- threshold, "same" when it
lies within, else "not resolved at N repeats"; and the repeats per side that would resolve it
(dlbench.stats.compare). Points in one folder only are listed at the end.

A point is flagged as the points tables flag it (dlbench.flags, from each folder's units):
unstable, short units (a steady unit below min_unit_seconds), contended (other processes used
more than max_other_cpus cores during a steady unit). The table names each side's flags
(old_flags, new_flags), and a point either side of which is contended or has short units timed
more than the framework: it is not called faster, slower or the same but "not resolved
(contended)" (or "(short units)"), its ratio still shown (`with_flags`). An unstable side still
decides, its interval carrying the spread; the figure marks flagged points as every figure
does (dlbench.plots: hollow unstable, a cross contended or short units).

Figures from two machines are not comparable without saying so: when the folders' environment
tables (tables/*-environment.csv) name different CPUs (model and the instruction-set flags
that decide kernels; `cpu_model` in tables older than those columns), a warning says so on
stderr, in the figure's title and in the table's `same_cpu` column (false). Where a folder has
no environment table, `same_cpu` is empty and a warning says it cannot tell.

From the workflow (Snakemake 9), comparing this checkout's results with another's:

    snakemake compare --config 'compare={baseline: ../before/results}'

or with `compare: {baseline: ../before/results}` in a file given by --configfile.
"""
import argparse
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, NullFormatter

from dlbench.flags import NAMES, NOTES, marker, named, not_resolved, point_flags, withdrawing
from dlbench.stats import FLAGS, ONE_SAMPLE, between_runs, compare, plain, point_key

COLOURS = {"faster": "tab:green", "slower": "tab:red", "same": "tab:grey", "not resolved": "tab:orange",
           ONE_SAMPLE: "tab:purple"}  # a side of one repeat (the memory pass's points): a ratio, no interval
TICKS = [0.1, 0.2, 0.5, 0.7, 0.8, 0.9, 1, 1.1, 1.2, 1.5, 2, 3, 5, 10]
RESULTS = ["old_mean", "new_mean", "ratio", "ci_low", "ci_high", "repeats", "repeats_needed", "verdict", "old_flags",
           "new_flags"]
CALLS = ("faster", "slower", "same")   # the verdicts a contended or short-unit side withdraws


# Columns and values renamed so that one word has one meaning, as tables before the rename
# hold them: a baseline folder of an older release still meets the same points.
RENAMED_COLUMNS = {"workload": "run_set"}
RENAMED_VALUES = {"strategy": {"single": "none"}, "input": {"device": "resident"}}


def units_tables(folder):
    """{run set: units table} of a results folder; an error naming the folder if it has none."""
    paths = sorted((Path(folder) / "tables").glob("*-units.csv"))
    if not paths:
        sys.exit(f"compare: {folder} has no units tables ({Path(folder) / 'tables' / '*-units.csv'}); "
                 "is it a results folder the workflow has aggregated?")
    return {path.name.removesuffix("-units.csv"): pd.read_csv(path).rename(columns=RENAMED_COLUMNS).replace(RENAMED_VALUES)
            for path in paths}


def environments(folder):
    """A results folder's environment tables in one frame (empty if it has none)."""
    tables = [pd.read_csv(path) for path in sorted((Path(folder) / "tables").glob("*-environment.csv"))]
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()


def cpus(old, new):
    """The CPUs each side's runs ran on, as two sets of strings, read from the columns both
    environment tables have: the exact CPU and the instruction-set flags that decide kernels
    (`cpu`, `cpu_flags`), else `cpu_model` (tables written before those columns); None where
    the two cannot be told apart (a side without an environment table)."""
    for columns in (["cpu", "cpu_flags"], ["cpu_model"]):
        if all(c in old and c in new for c in columns):
            return tuple({" | ".join(map(str, row)) for row in side[columns].drop_duplicates().itertuples(index=False)}
                         for side in (old, new))
    return None


def side_flags(part, units, cv_threshold):
    """Per row of a compare() table, the flags of its point in `units` (FLAGS names; [] where the
    point has no steady units there)."""
    columns, found = point_flags(units, cv_threshold)
    return [found.get(point_key(tuple(row[c] for c in columns)), []) for _, row in part[columns].iterrows()]


def with_flags(part, before, after, cv_threshold=0.05):
    """compare()'s table with each side's flags (old_flags, new_flags: named as dlbench.flags
    names them, '' if none), and a faster, slower or same verdict withdrawn where either side is
    contended or has short units: 'not resolved (contended)'."""
    part = part.copy()
    old_flags, new_flags = side_flags(part, before, cv_threshold), side_flags(part, after, cv_threshold)
    part["old_flags"], part["new_flags"] = list(map(named, old_flags)), list(map(named, new_flags))
    part["verdict"] = [not_resolved(o + n) if verdict in CALLS and withdrawing(o + n) else verdict
                       for verdict, o, n in zip(part["verdict"], old_flags, new_flags)]
    return part


def compare_folders(old, new, cv_threshold=0.05, threshold=0.05, confidence=0.95, **options):
    """compare() per run set (each has its own point columns), the intervals then widened by the
    variance between the two runs, measured over every run set's points (dlbench.stats.between_runs),
    and each side's flags (with_flags), in one table: the points of every run set's columns, the
    points in one folder only at the end, and a readable label of each point ("point", not written
    to the CSV). Returns (table, the between-run CV)."""
    sides, parts = {}, []
    for run_set in sorted(set(old) | set(new)):
        # a run set on one side only: the other side is an empty table with the same columns
        before = old[run_set] if run_set in old else new[run_set].iloc[:0]
        after = new[run_set] if run_set in new else before.iloc[:0]
        sides[run_set] = (before, after)
        parts.append(compare(before, after, threshold=threshold, confidence=confidence, **options))
    sizes = [len(part) for part in parts]
    widened, between = between_runs(pd.concat(parts, ignore_index=True), threshold, confidence)
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    parts = [widened.iloc[start:start + size][part.columns].reset_index(drop=True)
             for start, size, part in zip(starts, sizes, parts)]
    for index, run_set in enumerate(sides):
        part = with_flags(parts[index], *sides[run_set], cv_threshold)
        keys = [c for c in part.columns if c not in ("run_set", "framework", *RESULTS)]
        part["point"] = [" ".join(f"{k}={plain(v)}" for k, v in zip(keys, values) if not pd.isna(v))
                         for values in part[keys].itertuples(index=False)]
        parts[index] = part
    table = pd.concat(parts, ignore_index=True)
    keys = [c for c in table.columns if c not in ("run_set", "framework", "point", *RESULTS)]
    table[keys] = table[keys].convert_dtypes()  # 2, not 2.0, where other run sets leave NaN
    only = table["verdict"].str.startswith("only")
    return pd.concat([table[~only], table[only]], ignore_index=True)[["run_set", "framework", *keys, *RESULTS,
                                                                       "point"]], between


def label(row):
    return f"{row['run_set']} {row['framework']} {row['point']}".strip()


def row_flags(row):
    """The FLAGS names of either side of a compare table's row (its old_flags, new_flags text)."""
    words = {word for side in ("old_flags", "new_flags") if isinstance(row.get(side), str)
             for word in row[side].split(", ")}
    return [name for name in FLAGS if NAMES[name] in words]


def flagged_label(row):
    """A point's label with each side's flags, e.g. '... (new: contended)'."""
    sides = [f"{side}: {row[f'{side}_flags']}" for side in ("old", "new")
             if isinstance(row.get(f"{side}_flags"), str) and row[f"{side}_flags"]]
    return label(row) + (f" ({'; '.join(sides)})" if sides else "")


def colour(verdict):
    """The colour of a verdict ("not resolved at N repeats": orange)."""
    return COLOURS["not resolved" if verdict.startswith("not resolved") else verdict]


def draw(table, path, threshold, warning=None):
    both = table[~table["verdict"].str.startswith("only") & table["ratio"].notna()].reset_index(drop=True)
    fig, ax = plt.subplots(figsize=(8, 1.5 + 0.3 * max(len(both), 1)))
    if both.empty:
        ax.axis("off")
        ax.text(0.5, 0.5, "no point has steady units in both results folders", ha="center", va="center")
    else:
        seen = set()
        for y, row in both.iterrows():
            flags = row_flags(row)
            seen.update(flags)
            shape, face = marker(flags)
            ax.errorbar(row["ratio"], y, xerr=[[row["ratio"] - row["ci_low"]], [row["ci_high"] - row["ratio"]]],
                        fmt=shape, color=colour(row["verdict"]), markerfacecolor=face, capsize=3)
        ax.set_yticks(range(len(both)), [flagged_label(row) for _, row in both.iterrows()])
        ax.invert_yaxis()
        ax.set_xscale("log")
        # ratios near 1 fall between a log axis's decades: ticks a reader can read
        low, high = ax.get_xlim()
        ax.set_xticks([t for t in TICKS if low <= t <= high] or [1], minor=False)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.axvline(1, color="black", linewidth=1)
        # an interval wholly inside this band is "same"; wholly outside, faster or slower
        ax.axvspan(1 - threshold, 1 + threshold, color="grey", alpha=0.15, linewidth=0,
                   label=f"within {threshold:g}: same")
        ax.set_xlabel("new / old steady throughput (samples/s), hierarchical bootstrap interval; > 1 is faster")
        for verdict, shade in COLOURS.items():
            ax.plot([], [], "o", color=shade, label=verdict)
        # the marks of a flagged side, as every figure has them (dlbench.plots.interval_plot)
        if "unstable" in seen:
            ax.add_line(Line2D([], [], marker="o", linestyle="none", color="dimgrey", markerfacecolor="white",
                               label=f"hollow: {NOTES['unstable']}"))
        for name in withdrawing(FLAGS):
            if name in seen:
                ax.add_line(Line2D([], [], marker="X", linestyle="none", color="dimgrey", label=f"cross: {NOTES[name]}"))
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
    only = len(table) - len(both)
    ax.set_title(f"new / old, {len(both)} points" + (f" ({only} in one folder only: see the table)" if only else "")
                 + (f"\n{warning}" if warning else ""), color="tab:red" if warning else "black")
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old", help="the baseline results folder")
    parser.add_argument("new", help="the results folder to judge against it")
    parser.add_argument("--csv", required=True, type=Path)
    parser.add_argument("--figure", required=True, type=Path)
    parser.add_argument("--threshold", type=float, default=0.05, help="a smaller change is called the same")
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--cv-threshold", type=float, default=0.05,
                        help="a point whose units or runs vary more (CV) is flagged unstable (measurement.cv_threshold)")
    args = parser.parse_args()

    old, new = units_tables(args.old), units_tables(args.new)
    table, between = compare_folders(old, new, cv_threshold=args.cv_threshold, threshold=args.threshold,
                                     confidence=args.confidence, resamples=args.resamples, seed=args.seed)
    found = cpus(environments(args.old), environments(args.new))
    same_cpu = None if found is None else found[0] == found[1]
    warning = None
    if same_cpu is None:
        warning = "warning: cannot tell whether the two results ran on the same CPU (no environment table on a side)"
    elif not same_cpu:
        warning = (f"warning: the two results ran on different CPUs (old: {'; '.join(sorted(found[0]))}; "
                   f"new: {'; '.join(sorted(found[1]))}): a ratio mixes the machines")
    if warning:
        print(warning, file=sys.stderr)
    table.insert(len(table.columns) - 1, "same_cpu", pd.Series([same_cpu] * len(table), dtype="boolean"))
    for path in (args.csv, args.figure):
        path.parent.mkdir(parents=True, exist_ok=True)
    table.drop(columns="point").to_csv(args.csv, index=False)
    draw(table, args.figure, args.threshold,
         "different CPUs: see the table's same_cpu column" if same_cpu is False else None)

    verdicts = table["verdict"].str.replace(r"^not resolved .*$", "not resolved", regex=True)
    counts = verdicts.value_counts()
    summary = f"{sum(counts.get(v, 0) for v in COLOURS)} points: " + ", ".join(
        f"{counts.get(v, 0)} {v}" for v in COLOURS if v != ONE_SAMPLE or counts.get(v, 0))
    extra = [f"{counts[v]} {v}" for v in ("only in old", "only in new") if counts.get(v, 0)]
    print(summary + (f"; {', '.join(extra)}" if extra else ""))
    print("  between the two runs: " + (f"a point's spread {between:.1%} (CV), measured over their points and carried "
                                        "by every interval" if between == between else
                                        "too few points to measure their spread: no point is called") +
          "; to ask whether one change changed anything, run it as an A/B in one run (config variants)")
    withdrawn = table["verdict"].str.fullmatch(r"not resolved \(.*\)")
    for _, row in table[table["verdict"].isin(["faster", "slower"]) | withdrawn].iterrows():
        print(f"  {row['verdict']}: {flagged_label(row)} new/old {row['ratio']:.3f} "
              f"[{row['ci_low']:.3f}, {row['ci_high']:.3f}]")


if __name__ == "__main__":
    main()
