"""What every workload's figures share (report environment: matplotlib, seaborn)."""
import matplotlib.pyplot as plt  # Agg by itself where there is no display
import pandas as pd
import seaborn as sns

from dlbench.frameworks import FRAMEWORKS
from dlbench.stats import plain

sns.set_theme(style="whitegrid", context="paper")

# One colour per framework in every figure (the order of dlbench.frameworks); image libraries and
# inference runtimes, which are no framework, take theirs from a second palette by name.
FRAMEWORK_COLOURS = dict(zip(FRAMEWORKS, sns.color_palette("tab10", len(FRAMEWORKS))))
OTHER_COLOURS = sns.color_palette("Dark2", 8)


def colour(name):
    """The colour of a framework (or library, runtime) in every figure."""
    if name in FRAMEWORK_COLOURS:
        return FRAMEWORK_COLOURS[name]
    return OTHER_COLOURS[sum(map(ord, str(name))) % len(OTHER_COLOURS)]


def palette(names):
    """{name: colour} for seaborn's hue."""
    return {name: colour(name) for name in names}


# What the marks on a point mean, for every figure's legend
FLAG_NOTES = {
    "unstable": "unstable: its units or runs vary by more than the CV threshold",
    "short units": "short units: below measurement.min_unit_seconds",
    "contended": "contended: other processes used more than max_other_cpus during its units",
}


def save(grid, path, title):
    grid.figure.suptitle(title, y=1.02)
    grid.figure.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(grid.figure)


def no_data(path, message):
    """A figure that says why it is empty, so that the report still has every entry."""
    fig, ax = plt.subplots(figsize=(5, 2))
    ax.axis("off")
    ax.text(0.5, 0.5, message, ha="center", va="center")
    fig.savefig(path, dpi=120)
    plt.close(fig)


NUMERICS_NOTES = {"flush": "denormals flushed", "framework-default": "denormals as each framework ships"}


def with_numerics(title, runs):
    """A throughput figure's title with the runs' numerics policy (the runs table's `numerics`),
    since flushing denormals or not changes a framework's speed."""
    policies = sorted(set(runs["numerics"].dropna())) if "numerics" in runs else []
    if not policies:
        return title
    return f"{title} ({'; '.join(NUMERICS_NOTES.get(policy, policy) for policy in policies)})"


def flagged_label(row, label):
    """A point's label, saying when its figure is not a steady measurement."""
    flags = [name for name, flag in (("unstable", row.get("unstable")), ("short units", row.get("below_minimum")),
                                     ("contended", row.get("contended")))
             if flag is True or flag == "True"]
    return f"{label} ({', '.join(flags)})" if flags else label


def interval_plot(frame, labels, value, low, high, path, title, xlabel, reference=None):
    """One row per point: its value (dot) and its bootstrap interval (bar); flagged points
    (unstable, short units) in orange with the flag in the label. `labels` is a Series of
    the points' names; `reference` draws a dotted line (1 for ratios)."""
    if frame.empty:
        no_data(path, f"nothing to show: {title}")
        return
    names = [flagged_label(row, label) for (_, row), label in zip(frame.iterrows(), labels)]
    fig, ax = plt.subplots(figsize=(7, 0.6 + 0.35 * len(frame)))
    flagged = [name != label for name, label in zip(names, labels)]
    y = range(len(frame))
    for row, (_, point), flag in zip(y, frame.iterrows(), flagged):
        ax.errorbar(point[value], row, xerr=[[point[value] - point[low]], [point[high] - point[value]]], fmt="o",
                    color="tab:orange" if flag else "tab:blue", capsize=3)
    if reference is not None:
        ax.axvline(reference, color="grey", linestyle=":")
    ax.set_yticks(list(y), names)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def point_label(frame, columns):
    """'framework key=value ...' per row, from the columns that vary."""
    varying = [c for c in columns if c in frame and frame[c].nunique() > 1]
    return pd.Series([" ".join([str(row["framework"])] + [f"{c}={row[c]}" for c in varying])
                      for _, row in frame.iterrows()], index=frame.index, dtype=str)


def loss_curves(convergence, units, path, title):
    """Every framework's training loss by step on one axis: the convergence segments (from the
    shared start) and the timed units after them, each block's mean loss at its last step;
    repeats drawn as a band. Blocks without a loss (loader benchmarks) are left out."""
    columns = ["framework", "run_id", "step", "loss"]
    blocks = pd.concat([frame[frame["status"] == "ok"].reindex(columns=columns)
                        for frame in (convergence, units) if not frame.empty], ignore_index=True)
    blocks = blocks.dropna(subset=["step", "loss"])
    if blocks.empty:
        no_data(path, f"no training loss: {title}")
        return
    grid = sns.relplot(data=blocks, x="step", y="loss", hue="framework", kind="line", marker="o", errorbar=("pi", 100),
                       height=3.5, aspect=1.6)
    grid.set(xlabel="training step (from the shared start)", ylabel="training loss (block mean)")
    save(grid, path, title)


def modes_figure(ratios, runs, path, title):
    """What each mode buys within its framework: steady throughput in the mode over the
    framework's default mode at the same point (ratio and interval; 1, dotted, is no change),
    each label with the point and the median compilation of both modes there (the runs
    table's compile_s)."""
    if "mode" not in ratios or "mode" not in runs:
        no_data(path, "no run with an execution mode")
        return
    modes = ratios[ratios["framework"].fillna("").astype(str).ne("") & ratios["mode"].isna()
                   & ratios["comparison"].astype(str).str.fullmatch(r"[\w-]+ / [\w-]+")].reset_index(drop=True)
    columns = list(ratios.columns)
    keys = [k for k in columns[columns.index("framework") + 1:columns.index("ratio")] if k != "mode"]

    def label(row):
        where = {k: row[k] for k in keys if pd.notna(row[k])}
        same = runs[(runs["framework"] == row["framework"])
                    & (runs[list(where)] == pd.Series(where)).all(axis=1)] if where else runs
        seconds = [same.loc[same["mode"] == m, "compile_s"].median() for m in row["comparison"].split(" / ")]
        spent = ", ".join(f"{s:.1f} s" if pd.notna(s) else "?" for s in seconds)
        point = " ".join(f"{k}={plain(v)}" for k, v in where.items())
        return f"{row['framework']} {row['comparison']} {point} (compilation {spent})"

    interval_plot(modes, pd.Series([label(row) for _, row in modes.iterrows()], dtype=str), "ratio", "ci_low",
                  "ci_high", path, title, "steady throughput, mode / the framework's default mode (interval)",
                  reference=1)
