"""How noisy finished runs were, and what that noise costs: one command, three analyses.

    python benchmarks/noise.py runs [RESULTS] [--width 1.15]
    python benchmarks/noise.py frameworks LABEL=RESULTS ... [--sets mnist imdb chestxray]
    python benchmarks/noise.py frameworks --variants RESULTS [--sets mnist imdb]
    python benchmarks/noise.py moderation [RESULTS]

`runs`, from the run records (RESULTS/runs), per run set: the median CV between processes of a
point (the CV of its first 3 repeats' means; points with fewer are left out) and the cores other
processes took during its steady units (their median, and the share above 0.5: contended).
And how many steady units a process should time, by Kalibera and Jones ("Rigorous benchmarking in
reasonable time", 2013, the two-level design): with c_run the seconds a process costs besides its
steady units (start-up, compiling, warm-up, convergence, evaluation), c_unit the seconds of a
steady unit, s2_within the variance of a unit's throughput within a process and s2_between the
variance of the processes' means beyond what s2_within explains, the variance of a point's mean
per second spent is least at sqrt(c_run s2_within / (c_unit s2_between)) units a process (the
medians over the run set's points, each variance relative to its point's mean squared). And what
a narrower answer costs: the processes a point needs for a ratio of two of its points to have a
95% interval no wider than --width (high / low), at the run set's variance between processes as
the statistics moderate it (`dlbench.stats.variance_prior`, equal repeats a side, the normal
quantile: the prior's degrees of freedom are large here), and the minutes that takes at the run
set's mean process time and number of points.

`frameworks`, from the tables (RESULTS/tables), between-process noise and page faults per
framework, side by side for results folders (e.g. a run under `numerics.allocator:
framework-default` and one under `fixed`, on the same machine): per timed run set and framework,
at each point in its default mode, the CV of its repeats' mean steady throughput (the points
table's cv_between) and the minor page faults per steady step (the units table's minor_faults /
steps), their median over the points; the CPU each folder ran on. With --variants, one run of
variants (presets/allocator.yaml: each framework as configured, and its variant under another
allocator policy, interleaved in one run): each framework against its variant, with the mean
steady throughput (the points table's mean) beside.

`moderation`, from the units tables: what the run set's variance prior changes. Every headline
ratio's interval from each pair's own variances (Welch) and moderated by its run set's prior
(dlbench.stats.variance_prior), side by side: how many are resolved (the interval excludes 1, or
lies within 0.95-1.05) and their median width (high / low), per run set and in all.
"""
import argparse
import collections
import glob
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from dlbench import stats  # noqa: E402
from dlbench.frameworks import FRAMEWORKS  # noqa: E402


# -- runs: per run set, from the records

def runs(folder, width):
    points = collections.defaultdict(dict)
    other = collections.defaultdict(list)
    costs = collections.defaultdict(list)  # (c_run, c_unit) per process
    process_s = collections.defaultdict(list)
    for f in glob.glob(f"{folder}/runs/*/*/*.json"):
        run_set = f.split("/runs/")[1].split("/")[0]
        if run_set.endswith("-memory"):
            continue
        with open(f) as handle:
            r = json.load(handle)
        if r.get("status") != "ok":
            continue
        steady = [u for u in r["units"] if u["kind"] == "steady"]
        if not steady:
            continue
        rep = r["spec"]["repeat"]
        key = (f.split("/runs/")[1].split("/")[1], r["run_id"].split("_repeat~")[0])
        points[run_set].setdefault(key, {})[rep] = np.array([u["samples"] / u["wall_s"] for u in steady])
        other[run_set] += [u["machine"]["other_cpu_s"] / u["wall_s"] for u in steady if u.get("machine")]
        steady_s = sum(u["wall_s"] for u in steady)
        costs[run_set].append((r["wall_s"] - steady_s, steady_s / len(steady)))
        process_s[run_set].append(r["wall_s"])
    for run_set in sorted(points):
        cvs, within, between = [], [], []
        for reps in points[run_set].values():
            first = [reps[k].mean() for k in (1, 2, 3) if k in reps]
            if len(first) == 3:
                cvs.append(np.std(first, ddof=1) / np.mean(first))
            measured = [units for units in reps.values() if len(units) > 1]
            if len(measured) >= 3:
                mean = np.mean([units.mean() for units in measured])
                w = np.mean([units.var(ddof=1) for units in measured]) / mean ** 2
                m = np.mean([len(units) for units in measured])
                within.append(w)
                between.append(max(np.var([units.mean() for units in measured], ddof=1) / mean ** 2 - w / m, 0.0))
        o = np.array(other[run_set])
        print(f"{run_set}: points with 3 repeats {len(cvs)}, median between-process CV "
              f"{100 * np.median(cvs) if cvs else float('nan'):.1f}%; other processes per steady unit: median "
              f"{np.median(o):.2f} cores, above 0.5 in {np.mean(o > 0.5):.0%} of {len(o)}")
        if within:
            c_run, c_unit = np.median(costs[run_set], axis=0)
            w, b = np.median(within), np.median(between)
            best = np.sqrt(c_run * w / (c_unit * b)) if b > 0 else float("inf")
            print(f"  a process: {c_run:.1f} s besides its steady units, {c_unit:.2f} s a unit; CV within "
                  f"{100 * np.sqrt(w):.1f}%, between beyond it {100 * np.sqrt(b):.1f}%: the least variance per "
                  f"second at {best:.1f} steady units a process")
        _, s2 = stats.variance_prior([list(reps.values()) for reps in points[run_set].values()])
        if s2 > 0:
            # a ratio's log interval: +-1.96 sqrt(2 s2 / n), its width (high / low) exp(2 x 1.96 sqrt(2 s2 / n))
            needed = int(np.ceil(2 * s2 * (2 * 1.96 / np.log(width)) ** 2))
            minutes = needed * len(points[run_set]) * np.mean(process_s[run_set]) / 60
            print(f"  between processes (moderated) {100 * np.sqrt(s2):.1f}% of the log: a ratio within x{width} "
                  f"needs {needed} processes a point, {minutes:.0f} min for its {len(points[run_set])} points at "
                  f"{np.mean(process_s[run_set]):.1f} s a process (now {len(process_s[run_set])} processes, "
                  f"{sum(process_s[run_set]) / 60:.0f} min)")


# -- frameworks: per framework, folders (or a framework and its variants) side by side, from the tables

def default_mode(frame):
    if "mode" not in frame:
        return frame
    return frame[frame.apply(lambda r: r["framework"] in FRAMEWORKS and r["mode"] == FRAMEWORKS[r["framework"]].default_mode,
                             axis=1)]


def figures(tables, run_set):
    """{(framework, variant or ""): (median CV between processes, median faults per step, median
    mean steady throughput, points)} of a run set."""
    points = subjects(default_mode(pd.read_csv(tables / f"{run_set}-points.csv")))
    units = subjects(default_mode(pd.read_csv(tables / f"{run_set}-units.csv")))
    steady = units[(units["kind"] == "steady") & (units["status"] == "ok")]
    faults = steady.groupby(["framework", "subject"]).apply(lambda g: (g["minor_faults"] / g["steps"]).median(),
                                                            include_groups=False)
    found = {}
    for key, rows in points.groupby(["framework", "subject"]):
        found[key] = (rows["cv_between"].median(), faults.get(key), rows["mean"].median(), len(rows))
    return found


def subjects(frame):
    """The frame with `subject`: its variant's name, "" for the framework as configured."""
    return frame.assign(subject=frame["variant"].fillna("") if "variant" in frame else "")


def cell(value, form):
    return "" if value is None or pd.isna(value) else format(value, form)


def variants_table(folder, run_sets):
    """Each framework as configured against each of its variants, in one run's tables."""
    print("\n| run set | framework | CV | faults/step | samples/s | variant | CV | faults/step | samples/s | ratio |\n"
          "|" + "---|" * 10)
    for run_set in run_sets:
        found = figures(Path(folder) / "tables", run_set)
        for (framework, subject), (cv, faults, mean, _) in sorted(found.items()):
            if not subject:
                continue
            base_cv, base_faults, base_mean, _ = found.get((framework, ""), (None, None, None, 0))
            print(f"| {run_set} | {framework} | {cell(base_cv, '.1%')} | {cell(base_faults, ',.0f')} | "
                  f"{cell(base_mean, ',.0f')} | {subject} | {cell(cv, '.1%')} | {cell(faults, ',.0f')} | "
                  f"{cell(mean, ',.0f')} | {cell(mean / base_mean if base_mean else None, '.3f')} |")


def frameworks(labelled, variants, run_sets):
    folders = {"run": variants} if variants else dict(item.split("=", 1) for item in labelled)
    for label, folder in folders.items():
        env = pd.read_csv(Path(folder) / "tables" / f"{run_sets[0]}-environment.csv")
        print(f"{label}: {folder}: {'; '.join(sorted(set(env['cpu'].astype(str))))}; commit "
              f"{', '.join(sorted(set(env['git_commit'].astype(str).str[:7])))}")
    if variants:
        return variants_table(variants, run_sets)
    header = "| run set | framework | " + " | ".join(f"{label} CV | {label} faults/step" for label in folders) + " |"
    print("\n" + header + "\n|" + "---|" * (2 + 2 * len(folders)))
    for run_set in run_sets:
        found = {label: figures(Path(folder) / "tables", run_set) for label, folder in folders.items()}
        for framework in FRAMEWORKS:
            cells = []
            for label in folders:
                cv, faults, _, _ = found[label].get((framework, ""), (None, None, None, 0))
                cells += [cell(cv, ".1%"), cell(faults, ",.0f")]
            if any(cells):
                print(f"| {run_set} | {framework} | " + " | ".join(cells) + " |")


# -- moderation: each headline ratio's interval with and without its run set's prior

def moderation(results):
    rows = []
    for path in sorted(glob.glob(f"{results}/tables/*-units.csv")):
        if path.endswith("-memory-units.csv"):  # the memory pass times nothing the headline reads
            continue
        units = pd.read_csv(path)
        if units.empty or "samples_per_s" not in units:
            continue
        _, groups, found = stats.comparisons(units)
        priors = stats.variance_priors(groups.items())
        for c in found:
            sides = [stats.repeats_of(groups[c["num"]]), stats.repeats_of(groups[c["den"]])]
            for kind, prior in (("own", stats.NO_PRIOR), ("moderated", priors[c["num"][0]])):
                _, low, high = stats.interval(sides, 0.95, 2000, 0, prior)
                rows.append({"run_set": c["num"][0], "kind": kind, "width": high / low,
                             "resolved": low > 1 or high < 1 or (low >= 0.95 and high <= 1.05)})
        for run_set, (d0, s0) in priors.items():
            print(f"{run_set}: prior degrees of freedom {d0:.3g}, CV between processes {np.sqrt(s0):.3f}")
    table = pd.DataFrame(rows)
    summary = lambda frame: frame.agg(resolved=("resolved", "sum"), ratios=("resolved", "size"),
                                      median_width=("width", "median")).round(3)
    print(summary(table.groupby(["run_set", "kind"])).to_string())
    print(summary(table.groupby("kind")).to_string())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    runs_parser = commands.add_parser("runs", help="per run set, from the records: CV between processes, "
                                                   "contention, units a process, processes a width needs")
    runs_parser.add_argument("folder", nargs="?", default="results")
    runs_parser.add_argument("--width", type=float, default=1.15, help="the ratio interval's high / low to cost")
    frameworks_parser = commands.add_parser("frameworks", help="per framework, folders or variants side by side: "
                                                               "CV between processes and page faults")
    frameworks_parser.add_argument("folders", nargs="*", help="label=results folder")
    frameworks_parser.add_argument("--variants", metavar="FOLDER",
                                   help="one run's results: each framework against its variants")
    frameworks_parser.add_argument("--sets", nargs="+", default=["mnist", "imdb", "chestxray"])
    moderation_parser = commands.add_parser("moderation", help="each headline ratio's interval with and without "
                                                               "its run set's variance prior")
    moderation_parser.add_argument("folder", nargs="?", default="results")
    args = parser.parse_args(argv)
    if args.command == "runs":
        runs(args.folder, args.width)
    elif args.command == "frameworks":
        frameworks(args.folders, args.variants, args.sets)
    else:
        moderation(args.folder)


if __name__ == "__main__":
    sys.exit(main())
