"""What makes two processes of one point differ: the between-process CV of one point under each
candidate setting, side by side.

    python benchmarks/noise_sources.py --workload mnist --framework pytorch [--rounds 8]
        [--conditions base passive bound hugepages quiet-sampler] [--out noise.csv]

Each round runs the point once under every condition, in an order rotated from round to round, so
that the machine's drift falls on every condition alike. A run is the harness as the workflow runs
it (python -m dlbench.harness, no convergence segments); its value is the mean samples/s of its steady
units. Prints, per condition, the CV between its processes with a 95% bootstrap interval
(scipy.stats.bootstrap), and the mean CV of the units within a process. The conditions:

  base           as the workflow runs today
  passive        OMP_WAIT_POLICY=PASSIVE: OpenMP threads sleep at a barrier instead of spinning
  active         OMP_WAIT_POLICY=ACTIVE
  bound          OMP_PROC_BIND=close, OMP_PLACES=cores: each OpenMP thread pinned to its core
  hugepages      GLIBC_TUNABLES=glibc.malloc.hugetlb=1: malloc asks for transparent huge pages
  malloc-keeps   glibc's malloc keeps what is freed (mmap threshold at its 32 MiB maximum, no trim)
  jemalloc       LD_PRELOAD of Debian's libjemalloc2
  quiet-sampler  the harness samples memory and utilisation every 5 s instead of every 0.5 s
  long           12 steady units instead of the config's (does a longer measurement average
                 out what differs between processes, or is it the process's own?)
  long-units     units of 2 s instead of the config's min_unit_seconds
  cold           compiles from an empty compile cache, filling it (a point's first repeat)
  warm           loads what the last cold run compiled (measurement.compile_cache: a later
                 repeat); the other conditions compile cold in an empty cache of their own

Then, per condition after the first, its steady throughput over the first's with the workflow's
95% interval (dlbench.stats.interval), and the mean compile_s and wall_s of its processes
(`--conditions cold warm`: does loading compiled programs change the steady state?).

Run it after the workflow has prepared the data of the config (snakemake --cores all), with
nothing else running.
"""
import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from scipy import stats

from dlbench.config import load_config
from dlbench.definitions import definition, run_set
from dlbench.envs import env_hash
from dlbench.spec_types import CompileCache, Convergence
from dlbench.specs import spec_to_json
from dlbench.stats import interval as ratio_interval
from dlbench.workloads import WORKLOADS

REPO = Path(__file__).resolve().parents[1]
BARE = [w for w in WORKLOADS if hasattr(definition(w), "overhead_row")]
CONDITIONS = {
    "base": {},
    "passive": {"OMP_WAIT_POLICY": "PASSIVE"},
    "active": {"OMP_WAIT_POLICY": "ACTIVE"},
    "bound": {"OMP_PROC_BIND": "close", "OMP_PLACES": "cores"},
    "hugepages": {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"},
    "malloc-keeps": {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967296"},
    "jemalloc": {"LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"},
    "quiet-sampler": {},
    "long": {},
    "long-units": {},
    "cold": {},
    "warm": {},
}
# Conditions that measure differently: steady units of the same length, four times as many; or
# units four times as long
MEASURE = {"long": {"steady_units": 12}, "long-units": {"min_unit_seconds": 2.0}}
HARNESS = "import sys, dlbench.harness as h; h.SAMPLE_INTERVAL_S = {interval}; sys.exit(h.main())"


def run(python, spec, condition, workdir):
    if condition in MEASURE:
        spec = dataclasses.replace(spec, measure=dataclasses.replace(spec.measure, **MEASURE[condition]))
    shared = CompileCache(directory=str(Path(workdir) / "compile-cache"), fill=condition == "cold")
    spec = dataclasses.replace(spec, compile_cache=shared if condition in ("cold", "warm") else
                               CompileCache(directory=None, fill=True))
    spec_json = spec_to_json(spec)
    out = Path(workdir) / "record.json"
    interval = 5.0 if condition == "quiet-sampler" else "h.SAMPLE_INTERVAL_S"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), **CONDITIONS[condition]}
    subprocess.run([python, "-c", HARNESS.format(interval=interval), "--spec", spec_json, "--out", str(out)],
                   check=True, cwd=REPO, capture_output=True, env=env)
    record = json.loads(out.read_text())
    if record["status"] != "ok":
        raise SystemExit(f"{condition}: the run failed: {record['error']}")
    steady = [u["samples"] / u["wall_s"] for u in record["units"] if u["kind"] == "steady"]
    return (float(np.mean(steady)), float(np.std(steady, ddof=1) / np.mean(steady)), steady,
            record["summary"]["compile_s"], record["wall_s"])


def cv(values):
    return np.std(values, ddof=1) / np.mean(values)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", required=True, choices=BARE)
    parser.add_argument("--framework", required=True)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--conditions", nargs="+", default=list(CONDITIONS), choices=list(CONDITIONS))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--configfile", nargs="+", default=[REPO / "config.yaml"])
    parser.add_argument("--out", type=Path, help="append a CSV row per run here")
    args = parser.parse_args()
    for condition in args.conditions:
        preload = CONDITIONS[condition].get("LD_PRELOAD")
        if preload and not Path(preload).exists():  # the loader would warn and run without it
            raise SystemExit(f"condition {condition}: {preload} is not installed (apt-get install libjemalloc2)")
    config = load_config(*args.configfile)
    row = {**definition(args.workload).overhead_row(config), "framework": args.framework, "repeat": 1}
    spec = run_set(args.workload).build(config, row, args.threads)
    spec = dataclasses.replace(spec, convergence=Convergence(0, 1))
    venvs = Path(config["venv_prefix"] or "~/.cache/dlbench/venvs").expanduser()
    python = str(venvs / f"{args.framework}-{env_hash(REPO / 'envs' / f'{args.framework}.yaml')}" / "python")
    means = {c: [] for c in args.conditions}
    within = {c: [] for c in args.conditions}
    processes = {c: [] for c in args.conditions}  # (steady units, compile_s, wall_s) of each process
    with tempfile.TemporaryDirectory() as workdir:
        if "warm" in args.conditions:
            run(python, spec, "cold", workdir)  # fills the cache that round 1's warm run reads
        for round_ in range(args.rounds):
            k = round_ % len(args.conditions)
            for condition in args.conditions[k:] + args.conditions[:k]:
                mean, unit_cv, units, compile_s, wall_s = run(python, spec, condition, workdir)
                means[condition].append(mean)
                within[condition].append(unit_cv)
                processes[condition].append((units, compile_s, wall_s))
                print(f"round {round_ + 1} {condition}: {mean:.1f}/s (units' CV {100 * unit_cv:.1f}%)", flush=True)
                if args.out:
                    new = not args.out.exists()
                    with open(args.out, "a") as f:
                        if new:
                            f.write("workload,framework,round,condition,samples_per_s,units_cv,units,compile_s,wall_s\n")
                        f.write(f"{args.workload},{args.framework},{round_ + 1},{condition},{mean:.3f},{unit_cv:.5f},"
                                f"{' '.join(f'{u:.4f}' for u in units)},{compile_s:.3f},{wall_s:.2f}\n")
    for condition in args.conditions:
        values = np.array(means[condition])
        interval = stats.bootstrap((values,), cv, n_resamples=2000, random_state=0).confidence_interval
        print(f"{args.workload} {args.framework} {condition}: mean {values.mean():.1f}/s, between-process CV "
              f"{100 * cv(values):.1f}% [{100 * interval.low:.1f}, {100 * interval.high:.1f}] of {len(values)} "
              f"processes; units within a process {100 * np.mean(within[condition]):.1f}%")
    first = args.conditions[0]
    for condition in args.conditions:
        compile_s, wall_s = (np.mean([p[i] for p in processes[condition]]) for i in (1, 2))
        line = f"{condition}: compile_s {compile_s:.2f}, wall_s {wall_s:.1f} (means of {args.rounds} processes)"
        if condition != first:
            sides = [[np.array(p[0]) for p in processes[c]] for c in (condition, first)]
            ratio, low, high = ratio_interval(sides, 0.95, 2000, 0)
            line += f"; steady throughput {condition} / {first} {ratio:.3f} [{low:.3f}, {high:.3f}]"
        print(line)


if __name__ == "__main__":
    sys.exit(main())
