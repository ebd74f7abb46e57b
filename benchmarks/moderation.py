"""What the run set's variance prior changes in a finished run: every headline ratio's interval from
each pair's own variances (Welch) and moderated by its run set's prior (dlbench.stats.variance_prior),
side by side: how many are resolved (the interval excludes 1, or lies within 0.95-1.05) and their
median width (high / low), per run set and in all.

    PYTHONPATH=src python benchmarks/moderation.py results"""
import glob
import sys

import numpy as np
import pandas as pd

from dlbench import stats


def main(results="results"):
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


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
