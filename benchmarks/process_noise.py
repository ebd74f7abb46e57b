"""Between-process noise and page faults per framework, side by side for results folders (e.g. a run
under `numerics.allocator: framework-default` and one under `fixed`, on the same machine): per timed
run set and framework, at each point in its default mode, the CV of its repeats' mean steady
throughput (the points table's cv_between) and the minor page faults per steady step (the units
table's minor_faults / steps), their median over the points; the CPU each folder ran on.

    python benchmarks/process_noise.py before=../pre/results after=../d1/results --sets mnist imdb chestxray

or, in one run of variants (presets/allocator.yaml: each framework as configured, and its variant
under another allocator policy, interleaved in one run), each framework against its variant, with
the mean steady throughput (the points table's mean) beside:

    python benchmarks/process_noise.py --variants results --sets mnist imdb
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


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", nargs="*", help="label=results folder")
    parser.add_argument("--variants", metavar="FOLDER", help="one run's results: each framework against its variants")
    parser.add_argument("--sets", nargs="+", default=["mnist", "imdb", "chestxray"])
    args = parser.parse_args()
    folders = dict(item.split("=", 1) for item in args.folders)
    if args.variants:
        folders = {"run": args.variants}
    for label, folder in folders.items():
        env = pd.read_csv(Path(folder) / "tables" / f"{args.sets[0]}-environment.csv")
        print(f"{label}: {folder}: {'; '.join(sorted(set(env['cpu'].astype(str))))}; commit "
              f"{', '.join(sorted(set(env['git_commit'].astype(str).str[:7])))}")
    if args.variants:
        return variants_table(args.variants, args.sets)
    header = "| run set | framework | " + " | ".join(f"{label} CV | {label} faults/step" for label in folders) + " |"
    print("\n" + header + "\n|" + "---|" * (2 + 2 * len(folders)))
    for run_set in args.sets:
        found = {label: figures(Path(folder) / "tables", run_set) for label, folder in folders.items()}
        for framework in FRAMEWORKS:
            cells = []
            for label in folders:
                cv, faults, _, _ = found[label].get((framework, ""), (None, None, None, 0))
                cells += [cell(cv, ".1%"), cell(faults, ",.0f")]
            if any(cells):
                print(f"| {run_set} | {framework} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
