"""Validate a workload's run records and write its tidy tables (CSV)."""
import argparse
from pathlib import Path

from dlbench.tables import (RecordError, environment_rows, load_records, tables, unsuccessful,
                             utilisation_rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("records", nargs="+", type=Path)
    parser.add_argument("--runs", required=True, help="one row per run")
    parser.add_argument("--epochs", required=True, help="one row per run and epoch")
    parser.add_argument("--environment", required=True)
    parser.add_argument("--unsuccessful", required=True, help="failed and not applicable runs, with why")
    parser.add_argument("--utilisation", required=True, help="one row per utilisation sample of each run")
    args = parser.parse_args()
    try:
        records = load_records(args.records)
    except RecordError as err:
        raise SystemExit(f"error: {err}")
    runs, epochs = tables(records)
    runs.to_csv(args.runs, index=False)
    epochs.to_csv(args.epochs, index=False)
    environment_rows(records).to_csv(args.environment, index=False)
    unsuccessful(runs).to_csv(args.unsuccessful, index=False)
    utilisation_rows(records).to_csv(args.utilisation, index=False)
    counts = runs["status"].value_counts().to_dict()
    print(f"{len(records)} records: {counts}")


if __name__ == "__main__":
    main()
