"""The A/B of one run (config variants): at every point a variant shares with its framework,
variant / framework steady throughput with its interval and a verdict (faster, slower, same
within the threshold, or not resolved: dlbench.stats.ab_verdicts), as a table and as the
HTML fragment the report opens on (report/workflow.rst).

python scripts/ab.py UNITS.csv... --threshold 0.05 --out results/tables/ab.csv --html results/ab/summary.html
"""
import argparse
import html
import os
from pathlib import Path

import pandas as pd

from dlbench.stats import AB, DUET, ab_verdicts, plain

RESULTS = ("run_set", "framework", AB, "variant_mean", "framework_mean", "ratio", "ci_low", "ci_high", "repeats",
           "repeats_needed", "verdict")


def where(row):
    """A row's point, key=value."""
    return " ".join(f"{k}={plain(v)}" for k, v in row.items() if k not in (*RESULTS, DUET) and pd.notna(v))


def fragment(table, threshold):
    """The report's first view of an A/B: a line of counts per variant, then each point's verdict."""
    lines = ["<h2>Did it change? This run's A/B</h2>",
             f"<p>Each variant against its framework at every point both ran, interleaved in the same rounds from the "
             f"same weights and order (a duet variant: its run and its framework's at the same time, each on half of "
             f"the cores, pair by pair): <em>same</em> when the whole interval lies within 1 &plusmn; {threshold:g}, "
             f"<em>faster</em> or <em>slower</em> only when all of it lies beyond; else not resolved.</p>"]
    if table.empty:
        return "\n".join(lines + ["<p>No point of a variant has steady units beside its framework's.</p>"])
    for variant, rows in table.groupby(AB, sort=False):
        verdicts = rows["verdict"].str.replace(r"^not resolved.*$", "not resolved", regex=True).value_counts()
        counts = ", ".join(f"{n} {verdict}" for verdict, n in verdicts.items())
        duet = " (duet)" if DUET in rows and rows[DUET].notna().any() else ""
        lines.append(f"<h3>{html.escape(str(variant))} / {html.escape(str(rows['framework'].iloc[0]))}{duet}: "
                     f"{len(rows)} points, {html.escape(counts)}</h3><ul>")
        for _, row in rows.iterrows():
            bounds = "" if pd.isna(row["ci_low"]) else f" [{row['ci_low']:.3f}, {row['ci_high']:.3f}]"
            repeats = "" if " repeats" in row["verdict"] else f" ({row['repeats']} repeats)"
            lines.append(f"<li>{html.escape(row['run_set'])} {html.escape(where(row))}: {row['ratio']:.3f}{bounds} "
                         f"<strong>{html.escape(row['verdict'])}</strong>{repeats}</li>")
        lines.append("</ul>")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("units", nargs="+", type=Path, help="the timed run sets' <run_set>-units.csv")
    parser.add_argument("--threshold", type=float, default=0.05, help="a smaller change is called the same")
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--html", required=True, type=Path)
    args = parser.parse_args()
    parts = [ab_verdicts(units, args.threshold, args.confidence, args.resamples, args.seed)
             for units in map(pd.read_csv, args.units) if AB in units]
    parts = [part for part in parts if len(part)]
    table = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=list(RESULTS))
    keys = [c for c in table.columns if c not in RESULTS]
    table = table[[*RESULTS[:3], *keys, *RESULTS[3:]]]
    for path in (args.out, args.html):
        path.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(args.out.name + ".tmp")
    table.to_csv(tmp, index=False)
    os.replace(tmp, args.out)
    args.html.write_text(fragment(table, args.threshold) + "\n")
    verdicts = table["verdict"].str.replace(r"^not resolved.*$", "not resolved", regex=True).value_counts()
    print(f"A/B: {len(table)} points: " + ", ".join(f"{n} {v}" for v, n in verdicts.items()))
    for _, row in table.iterrows():
        bounds = "" if pd.isna(row["ci_low"]) else f" [{row['ci_low']:.3f}, {row['ci_high']:.3f}]"
        print(f"  {row['verdict']}: {row['run_set']} {row[AB]} / {row['framework']} {where(row)} "
              f"{row['ratio']:.3f}{bounds}")


if __name__ == "__main__":
    main()
