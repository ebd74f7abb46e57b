"""Between-process noise and page faults per framework, side by side for results folders (e.g. a run
under `numerics.allocator: framework-default` and one under `fixed`, on the same machine): per timed
run set and framework, at each point in its default mode, the CV of its repeats' mean steady
throughput (the points table's cv_between) and the minor page faults per steady step (the units
table's minor_faults / steps), their median over the points; the CPU each folder ran on.

    python benchmarks/process_noise.py before=../pre/results after=../d1/results --sets mnist imdb chestxray
"""
import argparse
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from dlbench.frameworks import FRAMEWORKS  # noqa: E402


def default_mode(frame):
    if "mode" not in frame:
        return frame
    return frame[frame.apply(lambda r: r["framework"] in FRAMEWORKS and r["mode"] == FRAMEWORKS[r["framework"]].default_mode,
                             axis=1)]


def figures(tables, run_set):
    """{framework: (median CV between processes, median faults per step, points)} of a run set."""
    points = default_mode(pd.read_csv(tables / f"{run_set}-points.csv"))
    units = default_mode(pd.read_csv(tables / f"{run_set}-units.csv"))
    steady = units[(units["kind"] == "steady") & (units["status"] == "ok")]
    faults = steady.groupby("framework").apply(lambda g: (g["minor_faults"] / g["steps"]).median(), include_groups=False)
    found = {}
    for framework, rows in points.groupby("framework"):
        found[framework] = (rows["cv_between"].median(), faults.get(framework), len(rows))
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", nargs="+", help="label=results folder")
    parser.add_argument("--sets", nargs="+", default=["mnist", "imdb", "chestxray"])
    args = parser.parse_args()
    folders = dict(item.split("=", 1) for item in args.folders)
    for label, folder in folders.items():
        env = pd.read_csv(Path(folder) / "tables" / f"{args.sets[0]}-environment.csv")
        print(f"{label}: {folder}: {'; '.join(sorted(set(env['cpu'].astype(str))))}; commit "
              f"{', '.join(sorted(set(env['git_commit'].astype(str).str[:7])))}")
    header = "| run set | framework | " + " | ".join(f"{label} CV | {label} faults/step" for label in folders) + " |"
    print("\n" + header + "\n|" + "---|" * (2 + 2 * len(folders)))
    for run_set in args.sets:
        found = {label: figures(Path(folder) / "tables", run_set) for label, folder in folders.items()}
        for framework in FRAMEWORKS:
            cells = []
            for label in folders:
                cv, faults, _ = found[label].get(framework, (None, None, 0))
                cells += ["" if cv is None or pd.isna(cv) else f"{cv:.1%}",
                          "" if faults is None or pd.isna(faults) else f"{faults:,.0f}"]
            if any(cells):
                print(f"| {run_set} | {framework} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
