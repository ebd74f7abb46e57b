"""Where a run's time went: the wall time of every run of the given run sets, split into its
phases from the runs tables (dlbench.tables.phase_seconds), and of the jobs that are no run,
from Snakemake's benchmark files (results/benchmarks/<rule>/<wildcards>.tsv): environment
builds, data preparation (the fetches, and the rules that each workload or study declares as
preparing its data: its DATA_RULES, given as --data-rules), the run sets' tables. A job that ran
without a benchmark file (a venv another copy of the workflow built, a job from before the file
existed) has no row.

Writes one table (run_set, framework, phase, seconds, jobs) and one figure: minutes per phase,
stacked, by run set and by framework. A job that is no run counts under the run set named for
the workload or study it serves (a workload's own run set bears its name), an environment build
under "environments"."""
import argparse
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from dlbench.plots import no_data

ENVIRONMENT = "environment build"
DATA = "data preparation"
WARMUP = "warm-up and compilation"
CONVERGENCE = "convergence training"
STEADY = "steady units"
CONTENDED = "contended units, timed again"
EVALUATION = "evaluation"
STARTUP = "start-up: Python and the framework"
BUILD = "start-up: model, weights and data"
PROBES = "start-up: numerics probes"
REST = "the rest"
FAILED = "failed runs"
TABLES = "tables and figures"
PHASES = (ENVIRONMENT, DATA, STARTUP, BUILD, PROBES, WARMUP, CONVERGENCE, STEADY, CONTENDED, EVALUATION, REST, FAILED,
          TABLES)
# the runs table's start-up steps (dlbench.tables.STARTUP_STEPS) in each start-up phase
STARTUP_PHASES = {STARTUP: ("interpreter", "framework", "setup"), BUILD: ("build", "first_batches"),
                  PROBES: ("numerics",)}
# Colour encodes the phase here (not the framework, as in the other figures): one fixed colour each,
# grey for what is not a phase of its own, black for the time failed runs cost.
_COLOURS = sns.color_palette("colorblind", 10)
PHASE_COLOURS = {ENVIRONMENT: _COLOURS[0], DATA: _COLOURS[8], STARTUP: _COLOURS[1], BUILD: _COLOURS[6],
                 PROBES: _COLOURS[9], WARMUP: _COLOURS[2], CONVERGENCE: _COLOURS[3], STEADY: _COLOURS[4],
                 CONTENDED: (0.55, 0.0, 0.0), EVALUATION: _COLOURS[5], REST: _COLOURS[7], FAILED: (0.1, 0.1, 0.1),
                 TABLES: (0.6, 0.6, 0.6)}

ENVIRONMENTS = "environments"  # the run_set of the environment builds
COLUMNS = ["run_set", "framework", "phase", "seconds", "jobs"]


def subject(runs):
    """What a run times: its framework, or for a run of no framework its library or runtime."""
    named = runs["framework"]
    for column in ("library", "runtime"):
        if column in runs:
            named = named.fillna(runs[column])
    return named


def run_phases(runs):
    """Seconds per run and phase (long form). Training is split at the steady pace: the convergence
    segments' steps at the run's steady seconds per step are convergence training; what the
    segments, calibration and warm-up units took beyond that is warm-up and compilation (the
    runs table's compile_s is that excess over every block before the first steady unit). A run
    with no steady pace keeps its segments' time as convergence training. Steady units that other
    processes contended were timed again: their time is a phase of its own. The start-up's steps
    (the runs table's startup_<step>_s) make the three start-up phases. A failed run's time is
    all "failed runs"; what the phases leave of a run's wall time is the rest."""
    runs = runs.assign(framework=subject(runs))
    at_steady_pace = runs["convergence_steps"] * runs["seconds_per_step"]
    convergence = at_steady_pace.fillna(runs["convergence_s"])
    phases = pd.DataFrame({
        **{phase: sum(runs.get(f"startup_{step}_s", pd.Series(float("nan"), index=runs.index)) for step in steps)
           for phase, steps in STARTUP_PHASES.items()},
        WARMUP: runs["convergence_s"] + runs["warmup_s"] - convergence,
        CONVERGENCE: convergence,
        STEADY: runs["steady_s"],
        CONTENDED: runs["contended_s"],
        EVALUATION: runs["eval_s"],
    })
    failed = runs["status"] == "failed"
    phases[REST] = (runs["wall_s"] - phases.fillna(0).sum(axis=1)).where(~failed)
    phases[FAILED] = runs["wall_s"].where(failed)
    long = pd.concat([runs[["run_set", "framework"]], phases], axis=1).melt(
        id_vars=["run_set", "framework"], var_name="phase", value_name="seconds")
    return long.dropna(subset=["seconds"])


def read_runs(paths):
    """The runs of every table (a run set with no runs has an empty table)."""
    tables = [pd.read_csv(path) for path in paths]
    tables = [table for table in tables if len(table)]
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()


def benchmark_jobs(folder, venvs, wheels, run_sets, data_rules):
    """Seconds of each benchmarked job (long form, jobs of 1), from the benchmark files present:
    only the current environments' builds (`venvs`: stack-hash names), the configured wheels
    (`wheels`: {name: workload}), data rules (`data_rules`: {rule: the workload or study whose
    data it prepares}; fetches: from their paths) and run sets; an older job's file is left out,
    and said so."""
    rows = []
    for path in sorted(Path(folder).glob("*/**/*.tsv")):
        rule = path.relative_to(folder).parts[0]
        name = str(path.relative_to(folder / rule)).removesuffix(".tsv")
        if rule == "build_venv" and name in venvs:
            row = (ENVIRONMENTS, name.rsplit("-", 1)[0], ENVIRONMENT)
        elif rule == "fetch_wheel" and name in wheels:
            row = (wheels[name], None, DATA)
        elif rule == "fetch_file":
            row = (name.split("/")[0], None, DATA)  # results/raw/<workload>/...
        elif rule in data_rules:
            row = (data_rules[rule], None, DATA)
        elif rule == "aggregate" and name in run_sets:
            row = (name, None, TABLES)
        else:
            print(f"not counted (not a job of this configuration): {path}", file=sys.stderr)
            continue
        # a job benchmarked with repeats has a row per repeat: all of them ran
        rows.append((*row, pd.read_csv(path, sep="\t")["s"].sum(), 1))
    return pd.DataFrame(rows, columns=COLUMNS)


def time_table(runs, benchmarks):
    """Seconds and jobs per run set, framework and phase, in the order of PHASES."""
    parts = [benchmarks]
    if len(runs):
        parts.append(run_phases(runs).assign(jobs=1))
    frame = pd.concat([part for part in parts if len(part)] or [benchmarks], ignore_index=True)
    table = frame.groupby(["run_set", "framework", "phase"], dropna=False, sort=False) \
        .agg(seconds=("seconds", "sum"), jobs=("jobs", "sum")).reset_index()
    table["phase"] = pd.Categorical(table["phase"], PHASES, ordered=True)
    return table.sort_values(["run_set", "framework", "phase"], ignore_index=True)[COLUMNS]


def stacked_bars(ax, table, by, title):
    """Minutes per phase, stacked, one bar per value of `by`, the largest total on top."""
    minutes = table.pivot_table(index=by, columns="phase", values="seconds", aggfunc="sum", observed=True,
                                dropna=False).fillna(0) / 60
    minutes = minutes.loc[minutes.sum(axis=1).sort_values().index]
    left = pd.Series(0.0, index=minutes.index)
    for phase in minutes.columns:
        ax.barh(minutes.index, minutes[phase], left=left, color=PHASE_COLOURS[phase], label=phase)
        left += minutes[phase]
    ax.set_title(title)
    ax.set_xlabel("wall time (min)")
    ax.set_ylabel("")


def plot(table, path, runs, other_jobs):
    if table.empty:
        no_data(path, "nothing to show: no runs and no benchmark files")
        return
    table = table.assign(framework=table["framework"].fillna("no framework (data, tables)"))
    rows = max(table["run_set"].nunique(), table["framework"].nunique())
    fig, (by_run_set, by_framework) = plt.subplots(1, 2, figsize=(12, 1.5 + 0.35 * rows))
    stacked_bars(by_run_set, table, "run_set", "by run set")
    stacked_bars(by_framework, table, "framework", "by framework (or library, runtime, environment)")
    present = [phase for phase in PHASES if phase in set(table["phase"])]
    handles = {label: handle for handle, label in zip(*by_run_set.get_legend_handles_labels())}
    fig.legend([handles[phase] for phase in present], present, loc="lower center", ncol=min(len(present), 5),
               bbox_to_anchor=(0.5, -0.02), frameon=False)
    others = f"{other_jobs} other jobs' benchmark files" if other_jobs else "no benchmark files of other jobs"
    fig.suptitle(f"Where did this run's time go? {table['seconds'].sum() / 60:.1f} min in all, the wall times of "
                 f"{runs} runs and {others} summed")
    fig.tight_layout(rect=(0, 0.08, 1, 0.97))
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", nargs="*", default=[], help="runs tables, results/tables/<set>-runs.csv")
    parser.add_argument("--benchmarks", type=Path, required=True, help="Snakemake's benchmark files' folder")
    parser.add_argument("--venvs", nargs="*", default=[], help="the current environments' <stack>-<hash> names")
    parser.add_argument("--wheels", nargs="*", default=[], help="<wheel>=<workload> of every fetched wheel")
    parser.add_argument("--data-rules", nargs="*", default=[],
                        help="<rule>=<workload> of every rule that prepares data (the workloads' and studies' DATA_RULES)")
    parser.add_argument("--table", type=Path, required=True)
    parser.add_argument("--figure", type=Path, required=True)
    args = parser.parse_args()
    run_sets = {Path(path).name.removesuffix("-runs.csv") for path in args.runs}
    wheels = dict(pair.split("=", 1) for pair in args.wheels)
    data_rules = dict(pair.split("=", 1) for pair in args.data_rules)
    runs, jobs = read_runs(args.runs), benchmark_jobs(args.benchmarks, set(args.venvs), wheels, run_sets, data_rules)
    table = time_table(runs, jobs)
    args.table.parent.mkdir(parents=True, exist_ok=True)
    args.figure.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.table, index=False)
    plot(table, args.figure, len(runs), len(jobs))


if __name__ == "__main__":
    main()
