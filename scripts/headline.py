"""The report's opening table: every run set's ratios with intervals, one line each.

python scripts/headline.py RATIOS.csv... --out HEADLINE.csv
"""
import argparse
import os
from pathlib import Path

import pandas as pd

from dlbench.disk import partial, run_main
from dlbench.stats import FLAGS, describe


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("ratios", nargs="+", type=Path, help="<run_set>-ratios.csv tables")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    frames = [frame for frame in map(pd.read_csv, args.ratios) if len(frame)]
    ratios = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    headline = pd.DataFrame({
        "comparison": [describe(row) for _, row in ratios.iterrows()],
        **{key: ratios[key] for key in ("run_set", "ratio", "ci_low", "ci_high", "verdict", *FLAGS) if key in ratios},
    })
    tmp = args.out.with_name(args.out.name + ".tmp")
    with partial(tmp, name=args.out):  # a full disk: the cut file removed, its log says so (dlbench.disk)
        headline.to_csv(tmp, index=False)
    os.replace(tmp, args.out)
    print(f"{len(headline)} ratios")


if __name__ == "__main__":
    run_main(main)
