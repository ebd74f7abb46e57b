"""How noisy a finished run was, per run set: the median CV between processes of a point (the CV of
its first 3 repeats' means; points with fewer are left out) and the cores other processes took
during its steady units (their median, and the share above 0.5: contended).

And how many steady units a process should time, by Kalibera and Jones ("Rigorous benchmarking
in reasonable time", 2013, the two-level design): with c_run the seconds a process costs besides
its steady units (start-up, compiling, warm-up, convergence, evaluation), c_unit the seconds of a
steady unit, s2_within the variance of a unit's throughput within a process and s2_between the
variance of the processes' means beyond what s2_within explains, the variance of a point's mean
per second spent is least at sqrt(c_run s2_within / (c_unit s2_between)) units a process (the
medians over the run set's points, each variance relative to its point's mean squared).

And what a narrower answer costs: the processes a point needs for a ratio of two of its points to
have a 95% interval no wider than --width (high / low), at the run set's variance between
processes as the statistics moderate it (`dlbench.stats.variance_prior`, equal repeats a side,
the normal quantile: the prior's degrees of freedom are large here), and the minutes that takes
at the run set's mean process time and number of points.

PYTHONPATH=src python benchmarks/noise.py results [--width 1.15]"""
import argparse, glob, json, collections
import numpy as np
from dlbench.stats import variance_prior
parser = argparse.ArgumentParser()
parser.add_argument("folder", nargs="?", default="results")
parser.add_argument("--width", type=float, default=1.15, help="the ratio interval's high / low to cost")
args = parser.parse_args()
folder = args.folder
points = collections.defaultdict(dict)
other = collections.defaultdict(list)
costs = collections.defaultdict(list)  # (c_run, c_unit) per process
process_s = collections.defaultdict(list)
for f in glob.glob(f"{folder}/runs/*/*/*.json"):
    run_set = f.split("/runs/")[1].split("/")[0]
    if run_set.endswith("-memory"):
        continue
    r = json.load(open(f))
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
        runs = [units for units in reps.values() if len(units) > 1]
        if len(runs) >= 3:
            mean = np.mean([units.mean() for units in runs])
            w = np.mean([units.var(ddof=1) for units in runs]) / mean ** 2
            m = np.mean([len(units) for units in runs])
            within.append(w)
            between.append(max(np.var([units.mean() for units in runs], ddof=1) / mean ** 2 - w / m, 0.0))
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
    _, s2 = variance_prior([list(reps.values()) for reps in points[run_set].values()])
    if s2 > 0:
        # a ratio's log interval: +-1.96 sqrt(2 s2 / n), its width (high / low) exp(2 x 1.96 sqrt(2 s2 / n))
        needed = int(np.ceil(2 * s2 * (2 * 1.96 / np.log(args.width)) ** 2))
        minutes = needed * len(points[run_set]) * np.mean(process_s[run_set]) / 60
        print(f"  between processes (moderated) {100 * np.sqrt(s2):.1f}% of the log: a ratio within x{args.width} "
              f"needs {needed} processes a point, {minutes:.0f} min for its {len(points[run_set])} points at "
              f"{np.mean(process_s[run_set]):.1f} s a process (now {len(process_s[run_set])} processes, "
              f"{sum(process_s[run_set]) / 60:.0f} min)")
