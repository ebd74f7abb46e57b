"""The toy workload's throughput: each point's mean and interval (RUNS POINTS OUT.png)."""
import sys

import pandas as pd

from dlbench.plots import interval_plot, no_data, point_label, with_numerics

runs_path, points_path, out = sys.argv[1:4]
runs, points = pd.read_csv(runs_path), pd.read_csv(points_path)
if points.empty:
    no_data(out, "no successful toy run")
else:
    interval_plot(points, point_label(points, ["batch"]), "mean", "ci_low", "ci_high", out,
                  with_numerics("Toy workload: training throughput", runs), "samples/s, steady units")
