"""Duet against sequential pairs, on an A/A (Bulej et al., "Duet Benchmarking", ICPE 2020): does
running A and B at the same time, each on its own core, decide an A/B with fewer processes or in
less time than running them one after the other?

Takes a record of a finished run (its spec: the same point, weights, order, numerics and allocator
policy) and runs --pairs pairs of that spec against itself through the harness, three ways,
interleaved pair by pair:

- sequential: A then B, each on every core with the run's threads (the workflow's A/B);
- sequential-1: A then B, each on core 0 with one thread (duet's per-side resources, one at a time);
- duet: A on core 0 and B on core 1 at the same time, one thread each.

Per schedule it prints each pair's B / A steady throughput, the CV of that ratio over the pairs, the
pairs a 95% interval within +-5% would need ((t sd / log 1.05)^2 over pairs of log ratios), the wall
time a pair took and so the minutes that +-5% would take. Every unit counts (max_other_cpus is
lifted for all three: in a duet the other side is the neighbour by design).

    PYTHONPATH=src python benchmarks/duet.py results/runs/mnist/pytorch/<run id>.json --pairs 6 \
        --python ~/.cache/dlbench/venvs/pytorch-*/bin/python --out duet.json

With --results, the same figures from a finished workflow run of both schedules side by side
(presets/duet.yaml: a sequential A/A variant and a duet one): per point and variant, the pairs are
its repeats (repeat r of the variant with repeat r of its side: the framework's run, or the duet's
framework side), a pair's time the wall time of its two runs (sequential: their sum; duet: the
longer, they ran at once).

    python benchmarks/duet.py --results results
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from scipy.stats import t as student_t

SCHEDULES = ("sequential", "sequential-1", "duet")


def side(python, spec, threads, core, out):
    """A harness process for the spec with `threads`, pinned to `core` (None: every core), in the
    framework's interpreter `python`."""
    spec = {**spec, "threads": threads, "measure": {**spec["measure"], "max_other_cpus": 64.0,
                                                    "max_contended_reruns": 0}}
    cmd = [python, "-m", "dlbench.harness", "--spec", json.dumps(spec), "--out", str(out)]
    if core is not None:
        cmd = ["taskset", "-c", str(core)] + cmd
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def throughput(path):
    record = json.loads(Path(path).read_text())
    if record["status"] != "ok":
        raise SystemExit(f"{path}: {record['status']}: {record['error']}")
    return record["summary"]["samples_per_s"]


def pair(python, spec, schedule, folder):
    """(B / A throughput, the pair's wall seconds) of one pair run under `schedule`."""
    a, b = folder / "a.json", folder / "b.json"
    start = time.perf_counter()
    if schedule == "duet":
        running = [side(python, spec, 1, 0, a), side(python, spec, 1, 1, b)]
        for proc in running:
            proc.wait()
    else:
        threads, core = (spec["threads"], None) if schedule == "sequential" else (1, 0)
        for out in (a, b):
            side(python, spec, threads, core, out).wait()
    return throughput(b) / throughput(a), time.perf_counter() - start


def summary(ratios, seconds):
    logs = np.log(ratios)
    sd = float(np.std(logs, ddof=1))
    t = float(student_t.ppf(0.975, len(logs) - 1))
    needed = max(2, math.ceil((t * sd / math.log(1.05)) ** 2))
    return {"ratios": [round(r, 4) for r in ratios], "cv": float(np.std(ratios, ddof=1) / np.mean(ratios)),
            "pairs_needed_5pct": needed, "pair_s": float(np.mean(seconds)),
            "minutes_for_5pct": needed * float(np.mean(seconds)) / 60}


def from_results(folder):
    """{(run set, point, variant, schedule): (ratios, pair seconds)} of a finished run's A/B variants."""
    records = [json.loads(p.read_text()) for p in sorted(Path(folder, "runs").glob("*/*/*.json"))]
    records = [r for r in records if r["status"] == "ok" and r["summary"]["samples_per_s"]]
    by_key = {}
    for r in records:
        point = {k: v for k, v in r["point"].items() if k not in ("variant", "duet")}
        key = (r["run_set"], r["framework"], json.dumps(point, sort_keys=True))
        by_key.setdefault(key, {})[(r["point"].get("variant"), r["point"].get("duet"), r["spec"]["repeat"])] = r
    found = {}
    for (run_set, framework, point), runs in by_key.items():
        for variant, duet, repeat in runs:
            if variant is None:
                continue
            base = runs.get((None, duet, repeat))
            if base is None:
                continue
            side = runs[(variant, duet, repeat)]
            ratio = side["summary"]["samples_per_s"] / base["summary"]["samples_per_s"]
            seconds = max(side["wall_s"], base["wall_s"]) if duet else side["wall_s"] + base["wall_s"]
            ratios, pair_s = found.setdefault((run_set, point, variant, "duet" if duet else "sequential"), ([], []))
            ratios.append(ratio)
            pair_s.append(seconds)
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("record", type=Path, nargs="?", help="a record whose spec the pairs run")
    parser.add_argument("--results", type=Path, help="a finished run's results folder: its A/B variants' figures")
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    parser.add_argument("--python", default=sys.executable, help="the framework's interpreter (its venv's python)")
    args = parser.parse_args()
    if args.results:
        print("| run set | point | variant | schedule | pairs | A/A ratio CV | pairs for +-5% | s a pair | min for +-5% |")
        print("|---|---|---|---|---|---|---|---|---|")
        for (run_set, point, variant, schedule), values in sorted(from_results(args.results).items()):
            r = summary(*values)
            point = " ".join(f"{k}={v}" for k, v in json.loads(point).items() if k in ("model", "batch", "input"))
            print(f"| {run_set} | {point} | {variant} | {schedule} | {len(values[0])} | {r['cv']:.1%} | "
                  f"{r['pairs_needed_5pct']} | {r['pair_s']:.1f} | {r['minutes_for_5pct']:.1f} |")
        return
    if args.record is None:
        parser.error("give a record, or --results")
    spec = json.loads(args.record.read_text())["spec"]
    # no compile cache of the point's: each process compiles (or not) alike
    spec = {**spec, "compile_cache": {"directory": None, "fill": True}}
    found = {schedule: ([], []) for schedule in SCHEDULES}
    with tempfile.TemporaryDirectory() as folder:
        for index in range(args.pairs):
            for schedule in SCHEDULES[index % 3:] + SCHEDULES[:index % 3]:   # the order turns each pair
                ratio, seconds = pair(args.python, spec, schedule, Path(folder))
                found[schedule][0].append(ratio)
                found[schedule][1].append(seconds)
                print(f"pair {index + 1} {schedule}: B/A {ratio:.3f} in {seconds:.1f} s", file=sys.stderr, flush=True)
    result = {"record": str(args.record), "cpu_count": os.cpu_count(),
              **{schedule: summary(*values) for schedule, values in found.items()}}
    for schedule in SCHEDULES:
        r = result[schedule]
        print(f"{schedule:>12}: A/A ratio CV {r['cv']:.1%} over {args.pairs} pairs; +-5% needs {r['pairs_needed_5pct']} "
              f"pairs, {r['pair_s']:.1f} s a pair: {r['minutes_for_5pct']:.1f} min")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
