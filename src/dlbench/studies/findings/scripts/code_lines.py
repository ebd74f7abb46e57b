"""The lines of framework-specific code each framework needed per workload, next to its speed: what
the IMDB study's "PyTorch is quicker to write and debug" can be measured as here. Lines of code
only: not the time it took to write or to debug them.

A line of code is a line of radon's sloc (radon.raw.analyze): a line with code, not blank, not
only a comment, not part of a docstring (radon takes a statement that is a lone string literal,
one line or several, for a docstring). Radon counts a comment's line within a statement of
several lines as code: those lines are removed first. tests/test_findings_code_lines.py checks
the count.

What is counted, per run set of the configured workloads and studies that has framework modules
of its own (mnist, imdb, chestxray, chestxray's loader benchmark in chestxray/loader/, matmul):
- code_lines: the framework's module of the run set, dlbench/workloads/<run set>/<module>.py
  (a study's: dlbench/studies/<run set>/<module>.py; dlbench.definitions.workload_module): its model, step and loader. A framework without one
  has no row (Keras' matmul: its product is its backend's). Keras' three frameworks run one
  module on three Keras backends: the same lines for each, module_shared says so.
- adapter_lines: the framework's adapter package, dlbench/frameworks/<module>/*.py, that every
  workload of the framework shares (devices, step, loaders): once per framework, the same in
  each of its rows (a Keras framework's, not also its engine's).
- shared_lines: the run set's task.py, the part every framework shares: for scale.
Not counted: the run sets of no framework (chestxray's preprocessing and decoding: image
libraries; onnx: inference runtimes, all in one file, runtimes.py, besides PyTorch's export) and
the memory pass (its runs run its workloads' modules).

Speed: each framework's steady throughput (the points table's mean, samples/s, with its
interval) at the run set's most common point (the one the most frameworks ran in their default
mode), in its default mode; NaN where it has none there.

Writes the table (one row per run set and framework) and one figure: per run set, the lines
(bars) and the lines against the speed."""
import argparse
import io
import sys
import textwrap
import tokenize
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.patches import Patch
from matplotlib.ticker import LogFormatter
from radon.raw import analyze

from dlbench.frameworks import FRAMEWORKS, adapter_module
from dlbench.plots import colour, no_data
from dlbench.stats import plain
from dlbench.definitions import run_sets, workload_module

UNIT = "lines of code, without comments, docstrings and blank lines"
SHARED_HATCH = "//"


def code_lines(path):
    """Radon's sloc of a Python file: without blank lines, comments and docstrings."""
    return analyze(without_comment_lines(Path(path).read_text())).sloc


def without_comment_lines(source):
    """The source less its lines that hold only a comment: radon's sloc counts those within a
    statement of several lines (between a call's arguments) as code."""
    comment_lines = {token.start[0] for token in tokenize.generate_tokens(io.StringIO(source).readline)
                     if token.type == tokenize.COMMENT and not token.line[:token.start[1]].strip()}
    return "\n".join(line for number, line in enumerate(source.splitlines(), 1) if number not in comment_lines)


def module_file(src, module):
    return Path(src) / (module.replace(".", "/") + ".py")


def adapter_files(src, framework):
    return sorted(Path(src, *adapter_module(framework).split(".")).glob("*.py"))


def framework_run_sets(workloads):
    """{run set name: RunSet} of the workloads' and studies' run sets that have framework modules of their own."""
    return {name: run_set for name, (_, run_set) in run_sets(workloads).items()
            if run_set.subject == "framework" and run_set.runs_as is None}


def point_keys(points):
    """The columns that name a point in a points table: those between framework and repeats, but mode."""
    columns = list(points.columns)
    return [c for c in columns[columns.index("framework") + 1:columns.index("repeats")] if c != "mode"]


def speed_at_common_point(points):
    """Each framework's row (by framework), in its default mode and in float32, at the point that the
    most frameworks ran so (of those with as many, the first in the table), and the point's name."""
    if points is None:
        return pd.DataFrame(columns=["mean"]), ""
    if "mode" in points:
        points = points[points["mode"] == points["framework"].map(lambda f: FRAMEWORKS[f].default_mode)]
    if "precision" in points:
        points = points[points["precision"] == "float32"]
    points = points[points["mean"].notna()]
    keys = point_keys(points)
    values, rows = (), points
    if keys and not points.empty:
        groups = points.groupby(keys, dropna=False, sort=False)
        values, rows = max(groups, key=lambda group: group[1]["framework"].nunique())  # max keeps the first of a tie
    values = values if isinstance(values, tuple) else (values,)
    name = " ".join(f"{k}={plain(v)}" for k, v in zip(keys, values) if pd.notna(v))
    return rows.groupby("framework").first(), name


def count(src, sets, frameworks, points_tables):
    """One row per run set and framework with a module: its lines, and its speed at the common point."""
    rows = []
    for name, run_set in sets.items():
        modules = {framework: module_file(src, workload_module(name, framework)) for framework in frameworks}
        modules = {framework: path for framework, path in modules.items() if path.exists()}
        users = pd.Series(modules).value_counts()
        shared_lines = code_lines(module_file(src, workload_module(name, None)))
        speed, point = speed_at_common_point(points_tables.get(name))
        for framework, path in modules.items():
            measured = speed.loc[framework] if framework in speed.index else {}
            rows.append({
                "run_set": name, "framework": framework, "module": str(path.relative_to(src)),
                "module_shared": bool(users[path] > 1), "code_lines": code_lines(path),
                "adapter_lines": sum(code_lines(f) for f in adapter_files(src, framework)),
                "shared_lines": shared_lines, "mode": measured.get("mode", np.nan),
                "point": point if framework in speed.index else "", "sample": run_set.sample,
                "samples_per_s": measured.get("mean", np.nan), "ci_low": measured.get("ci_low", np.nan),
                "ci_high": measured.get("ci_high", np.nan),
            })
    return pd.DataFrame(rows, columns=["run_set", "framework", "module", "module_shared", "code_lines",
                                       "adapter_lines", "shared_lines", "mode", "point", "sample", "samples_per_s",
                                       "ci_low", "ci_high"])


def counted_files(src, table):
    """Every file the table's counts read."""
    files = {Path(src) / module for module in table["module"]}
    files |= {module_file(src, workload_module(name, None)) for name in table["run_set"]}
    files |= {f for framework in table["framework"] for f in adapter_files(src, framework)}
    return {f.resolve() for f in files}


def lines_bars(ax, rows):
    """One bar per framework, in its colour; a module that frameworks share hatched."""
    for y, row in enumerate(rows.itertuples()):
        ax.barh(y, row.code_lines, color=colour(row.framework), hatch=SHARED_HATCH if row.module_shared else None,
                edgecolor="white")
        ax.text(row.code_lines, y, f" {row.code_lines}", va="center", fontsize=8)
    ax.set_yticks(range(len(rows)), rows["framework"])
    ax.invert_yaxis()
    ax.margins(x=0.15)


def lines_against_speed(ax, rows):
    """Each framework's lines (x) against its steady throughput (y, log), with its interval."""
    measured = rows[rows["samples_per_s"].notna()]
    if measured.empty:
        ax.text(0.5, 0.5, "no steady point in a default mode", ha="center", va="center", transform=ax.transAxes)
        ax.set_yticks([])
        ax.tick_params(axis="x", labelbottom=False)
        ax.grid(False)
        return
    for row in measured.itertuples():
        has_interval = pd.notna(row.ci_low) and pd.notna(row.ci_high)
        error = [[row.samples_per_s - row.ci_low], [row.ci_high - row.samples_per_s]] if has_interval else None
        ax.errorbar(row.code_lines, row.samples_per_s, yerr=error, fmt="o", color=colour(row.framework), capsize=3)
    ax.set_yscale("log")
    # matplotlib's choice of labelled ticks, written 200 rather than 2x10^2
    ax.yaxis.set_major_formatter(LogFormatter())
    ax.yaxis.set_minor_formatter(LogFormatter())
    ax.set_ylabel(f"steady {measured['sample'].iloc[0]}/s (log)")


def figure(table, path):
    if table.empty:
        no_data(path, "no run set with framework modules configured: nothing to count")
        return
    sets = list(dict.fromkeys(table["run_set"]))
    heights = [len(table[table["run_set"] == name]) for name in sets]
    fig, axes = plt.subplots(len(sets), 2, figsize=(11, 1.2 * len(sets) + 0.3 * sum(heights)), squeeze=False,
                             sharex="row", gridspec_kw={"height_ratios": heights}, layout="constrained")
    for (bars, speed), name in zip(axes, sets):
        rows = table[table["run_set"] == name]
        lines_bars(bars, rows)
        bars.set_title(f"{name}: each framework's module (task.py, shared by all: {rows['shared_lines'].iloc[0]})",
                       fontsize=9, loc="left")
        lines_against_speed(speed, rows)
        point = next((p for p in rows["point"] if p), "")
        at_point = f"\n{textwrap.fill(f'at {point}', 64)}" if point else ""
        speed.set_title(f"{name}: lines against speed, default modes{at_point}", fontsize=9, loc="left")
    for ax in axes[-1]:
        ax.set_xlabel(UNIT)
    if table["module_shared"].any():
        fig.legend(handles=[Patch(facecolor="lightgrey", hatch=SHARED_HATCH, edgecolor="white")],
                   labels=["hatched: one module shared by frameworks (Keras' three backends)"],
                   loc="outside lower left")
    fig.suptitle("How much framework-specific code did each framework need?")
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", required=True, help="the package's root, src/")
    parser.add_argument("--workloads", nargs="+", required=True, help="the configured workloads and studies")
    parser.add_argument("--frameworks", nargs="+", required=True)
    parser.add_argument("--points", nargs="*", default=[], help="results/tables/<run set>-points.csv")
    parser.add_argument("--inputs", nargs="*", default=[],
                        help="the files the rule takes as inputs: each counted file must be one of them")
    parser.add_argument("--table", required=True)
    parser.add_argument("--figure", required=True)
    args = parser.parse_args()
    src = Path(args.src)
    points = {Path(p).name.removesuffix("-points.csv"): pd.read_csv(p) for p in args.points}
    table = count(src, framework_run_sets(args.workloads), args.frameworks, points)
    # a counted file that is no input of the rule would not rerun it when edited
    missing = counted_files(src, table) - {Path(f).resolve() for f in args.inputs}
    if missing:
        sys.exit(f"counted, but not inputs of the rule: {', '.join(map(str, sorted(missing)))}")
    table.to_csv(args.table, index=False)
    figure(table, args.figure)


if __name__ == "__main__":
    main()
