"""The IMDB study's plan, checked: each exported model in each runtime, its agreement with
PyTorch's outputs, its inference throughput and its ratio to PyTorch's, from the ONNX runs,
points and ratios tables.

python plot.py --runs R.csv --points P.csv --ratios Q.csv --outdir DIR --table T.csv
"""
import argparse
from pathlib import Path

import pandas as pd

from dlbench.plots import interval_plot, no_data

POINT = ["model", "runtime", "batch"]


def runtimes_table(runs, points, ratios):
    """One row per model x runtime x batch: how its runs ended (ok, or the reason), the agreement
    with PyTorch (largest absolute difference, share of predicted classes), the throughput
    (inputs/s, mean of the repeats, bootstrap interval), and the ratio to PyTorch with its interval."""
    rows = []
    for key, group in runs.groupby(POINT, sort=False):
        point = dict(zip(POINT, key))
        ok = group[group["status"] == "ok"]
        reasons = sorted(set(group.loc[group["status"] != "ok", "error"].dropna().astype(str)))
        row = {**point, "runs": len(group), "ok": len(ok), "not_ok": "; ".join(reasons) or None,
               "max_abs_difference": ok["max_abs_difference"].max() if "max_abs_difference" in ok and len(ok) else None,
               "class_agreement": ok["class_agreement"].min() if "class_agreement" in ok and len(ok) else None}
        found = points[(points[POINT] == pd.Series(point)).all(axis=1)] if len(points) else points
        if len(found):
            row.update(inputs_per_s=found["mean"].iloc[0], inputs_per_s_low=found["ci_low"].iloc[0],
                       inputs_per_s_high=found["ci_high"].iloc[0])
        match = ratios[(ratios["comparison"] == f"{point['runtime']} / pytorch") & (ratios["model"] == point["model"])
                       & (ratios["batch"] == point["batch"])] if len(ratios) else ratios
        if point["runtime"] == "pytorch":
            row.update(ratio_to_pytorch=1.0)
        elif len(match):
            row.update(ratio_to_pytorch=match["ratio"].iloc[0], ratio_low=match["ci_low"].iloc[0],
                       ratio_high=match["ci_high"].iloc[0], verdict=match["verdict"].iloc[0])
        rows.append(row)
    columns = [*POINT, "runs", "ok", "not_ok", "max_abs_difference", "class_agreement", "inputs_per_s",
               "inputs_per_s_low", "inputs_per_s_high", "ratio_to_pytorch", "ratio_low", "ratio_high", "verdict"]
    return pd.DataFrame(rows, columns=columns)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name in ("runs", "points", "ratios", "table"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--outdir", required=True, type=Path)
    args = parser.parse_args()
    args.outdir.mkdir(parents=True, exist_ok=True)
    runs, points, ratios = (pd.read_csv(path) for path in (args.runs, args.points, args.ratios))
    table = runtimes_table(runs, points, ratios)
    table.to_csv(args.table, index=False)
    shown = table.dropna(subset=["inputs_per_s"])
    if shown.empty:
        no_data(args.outdir / "runtimes.png", "no successful ONNX run")
        return
    flagged = shown.merge(points[[*POINT, "unstable", "below_minimum", "contended"]], on=POINT, how="left")
    labels = flagged["model"] + " in " + flagged["runtime"] + ", batch " + flagged["batch"].astype(str)
    interval_plot(flagged, labels, "inputs_per_s", "inputs_per_s_low", "inputs_per_s_high",
                  args.outdir / "runtimes.png",
                  "Which runtime serves the PyTorch models exported through ONNX fastest? (inference inputs/s)",
                  "inputs/s in steady units (dot: mean of the repeats, bar: hierarchical bootstrap interval)")


if __name__ == "__main__":
    main()
