"""How noisy a finished run was, per run set: the median CV between processes of a point (the CV of
its first 3 repeats' means; points with fewer are left out) and the cores other processes took
during its steady units (their median, and the share above 0.5: contended).

python benchmarks/noise.py results"""
import glob, json, sys, collections
import numpy as np
folder = sys.argv[1] if len(sys.argv) > 1 else "results"
points = collections.defaultdict(dict)
other = collections.defaultdict(list)
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
    points[run_set].setdefault(key, {})[rep] = np.mean([u["samples"] / u["wall_s"] for u in steady])
    other[run_set] += [u["machine"]["other_cpu_s"] / u["wall_s"] for u in steady if u.get("machine")]
for run_set in sorted(points):
    cvs = []
    for reps in points[run_set].values():
        first = [reps[k] for k in (1, 2, 3) if k in reps]
        if len(first) == 3:
            cvs.append(np.std(first, ddof=1) / np.mean(first))
    o = np.array(other[run_set])
    print(f"{run_set}: points with 3 repeats {len(cvs)}, median between-process CV "
          f"{100 * np.median(cvs) if cvs else float('nan'):.1f}%; other processes per steady unit: median "
          f"{np.median(o):.2f} cores, above 0.5 in {np.mean(o > 0.5):.0%} of {len(o)}")
