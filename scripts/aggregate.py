"""Validate a set of run records and write its tidy tables (CSV): runs, convergence, timed units,
per-point statistics, ratios with intervals, environment, unsuccessful runs, utilisation.

A record that cannot be read or does not match the schema is reported by name, listed in
the unsuccessful-runs table as invalid, and left out; the others are still aggregated. The
tables are written only once all of them are made, each through a temporary file. A full disk
(or a permission, or memory) ends it with one line that says so and where (dlbench.disk).
"""
import argparse
import json
import os
import sys
from pathlib import Path

import pandas as pd

from dlbench.disk import partial, run_main
from dlbench.rounds import stopped
from dlbench.stats import point_statistics, ratios
from dlbench.tables import environment_rows, load_records, tables, units_table, unsuccessful, utilisation_rows


def write_csv(frame, path):
    tmp = Path(f"{path}.tmp")
    with partial(tmp, name=path):  # a full disk: the cut file removed, its log says so (dlbench.disk)
        frame.to_csv(tmp, index=False)
    os.replace(tmp, path)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("records", nargs="*", type=Path, help="none: every table with its header only")
    parser.add_argument("--runs", required=True, help="one row per run")
    parser.add_argument("--convergence", required=True, help="one row per run and convergence segment")
    parser.add_argument("--units", required=True, help="one row per timed unit (calibration, warm-up and steady)")
    parser.add_argument("--points", required=True, help="one row per point: median, IQR, interval, CV, flags")
    parser.add_argument("--ratios", required=True, help="throughput ratios between frameworks and settings")
    parser.add_argument("--environment", required=True)
    parser.add_argument("--unsuccessful", required=True, help="failed and not applicable runs, invalid records, with why")
    parser.add_argument("--utilisation", required=True, help="one row per utilisation sample of each run")
    parser.add_argument("--min-unit-seconds", type=float, required=True, help="shorter steady units are flagged")
    parser.add_argument("--max-other-cpus", type=float, required=True,
                        help="steady units during which other processes used more cores are flagged contended")
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument("--cv-threshold", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0, help="of the bootstrap")
    parser.add_argument("--target", nargs=2, metavar=("METRIC", "VALUE"),
                        help="time to accuracy: convergence steps until METRIC first reaches VALUE, times seconds per step")
    parser.add_argument("--frameworks", nargs="*", help="the configured order of the frameworks (ratio order)")
    parser.add_argument("--rounds", nargs="*", default=[],
                        help="the last adaptive round's plan (dlbench.rounds): the points table says why each point stopped")
    args = parser.parse_args()
    invalid = []
    records = load_records(args.records, invalid=invalid)
    for path, error in invalid:
        print(f"error: {error}", file=sys.stderr)
    target = (args.target[0], float(args.target[1])) if args.target else None
    if records:
        runs, convergence = tables(records, target)
    else:
        runs, convergence = pd.DataFrame(columns=["status"]), pd.DataFrame()
    units = units_table(records, args.min_unit_seconds, args.max_other_cpus)
    statistics = dict(confidence=args.confidence, resamples=args.resamples, seed=args.seed)
    points = point_statistics(units, cv_threshold=args.cv_threshold, **statistics)
    if args.rounds:
        points["stopped"] = stopped(points, json.loads(Path(args.rounds[0]).read_text()))
    frames = {args.runs: runs, args.convergence: convergence, args.units: units, args.points: points,
              args.ratios: ratios(units, frameworks=args.frameworks, cv_threshold=args.cv_threshold, **statistics),
              args.environment: environment_rows(records),
              args.unsuccessful: unsuccessful(runs, invalid), args.utilisation: utilisation_rows(records)}
    for path, frame in frames.items():
        write_csv(frame, path)
    counts = runs["status"].value_counts().to_dict()
    print(f"{len(records)} records: {counts}; {len(invalid)} invalid")


if __name__ == "__main__":
    run_main(main)
