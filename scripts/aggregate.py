"""Validate a workload's run records and write its tidy tables (CSV).

A record that cannot be read or does not match the schema is reported by name, listed in
the unsuccessful-runs table as invalid, and left out; the others are still aggregated. The
tables are written only once all of them are made, each through a temporary file.
"""
import argparse
import os
import sys
from pathlib import Path

import pandas as pd

from dlbench.tables import environment_rows, load_records, tables, unsuccessful, utilisation_rows


def write_csv(frame, path):
    tmp = Path(f"{path}.tmp")
    frame.to_csv(tmp, index=False)
    os.replace(tmp, path)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("records", nargs="+", type=Path)
    parser.add_argument("--runs", required=True, help="one row per run")
    parser.add_argument("--epochs", required=True, help="one row per run and epoch")
    parser.add_argument("--environment", required=True)
    parser.add_argument("--unsuccessful", required=True, help="failed and not applicable runs, invalid records, with why")
    parser.add_argument("--utilisation", required=True, help="one row per utilisation sample of each run")
    args = parser.parse_args()
    invalid = []
    records = load_records(args.records, invalid=invalid)
    for path, error in invalid:
        print(f"error: {error}", file=sys.stderr)
    if records:
        runs, epochs = tables(records)
    else:
        runs, epochs = pd.DataFrame(columns=["status"]), pd.DataFrame()
    frames = {args.runs: runs, args.epochs: epochs, args.environment: environment_rows(records),
              args.unsuccessful: unsuccessful(runs, invalid), args.utilisation: utilisation_rows(records)}
    for path, frame in frames.items():
        write_csv(frame, path)
    counts = runs["status"].value_counts().to_dict()
    print(f"{len(records)} records: {counts}; {len(invalid)} invalid")


if __name__ == "__main__":
    main()
