"""What every workload's figures share (report environment: matplotlib, seaborn)."""
import math
import matplotlib.pyplot as plt  # Agg by itself where there is no display
from matplotlib.lines import Line2D
import pandas as pd
import seaborn as sns

from dlbench.flags import NAMES, NOTES, WITHDRAWING, flags_of, marker
from dlbench.frameworks import FRAMEWORKS
from dlbench.stats import plain

sns.set_theme(style="whitegrid", context="paper")

# One colour per framework in every figure (the order of dlbench.frameworks); image libraries and
# inference runtimes, which are no framework, take theirs from a second palette by name.
FRAMEWORK_COLOURS = dict(zip(FRAMEWORKS, sns.color_palette("tab10", len(FRAMEWORKS))))
OTHER_COLOURS = sns.color_palette("Dark2", 7)  # not its eighth, grey: chainer's in tab10


def colour(name):
    """The colour of a framework (or library, runtime) in every figure."""
    if name in FRAMEWORK_COLOURS:
        return FRAMEWORK_COLOURS[name]
    return OTHER_COLOURS[sum(map(ord, str(name))) % len(OTHER_COLOURS)]


def palette(names):
    """{name: colour} for seaborn's hue."""
    return {name: colour(name) for name in names}


# What the marks on a point mean, for every figure's legend (the words of dlbench.flags, which the
# findings and compare use too)
FLAG_NOTES = {NAMES[name]: note for name, note in NOTES.items()}


# seaborn's interval for a bar or line over the repeats: their whole range, said on the axis
REPEATS_RANGE = ("pi", 100)
REPEATS_RANGE_NOTE = "bar: mean of the repeats, line: their range"
# hues that are no framework take a sequential palette, so that the frameworks' colours mean a framework only
NOT_FRAMEWORK_PALETTE = "crest"


def save(grid, path, title):
    grid.figure.suptitle(title, y=1.02)
    grid.figure.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(grid.figure)


def no_data(path, message):
    """A figure that says why it is empty, so that the report still has every entry."""
    fig, ax = plt.subplots(figsize=(5, 2))
    ax.axis("off")
    ax.text(0.5, 0.5, message, ha="center", va="center", wrap=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


NUMERICS_NOTES = {"flush": "denormals flushed", "framework-default": "denormals as each framework ships"}


def with_numerics(title, runs):
    """A throughput figure's title with the runs' numerics policy (the runs table's `numerics`),
    since flushing denormals or not changes a framework's speed; said inside the title's closing
    parenthesis where it has one."""
    policies = sorted(set(runs["numerics"].dropna())) if "numerics" in runs else []
    if not policies:
        return title
    note = "; ".join(NUMERICS_NOTES.get(policy, policy) for policy in policies)
    return f"{title[:-1]}, {note})" if title.endswith(")") else f"{title} ({note})"


def flags(row):
    """The FLAG_NOTES names of what makes a point not a steady measurement."""
    return [NAMES[name] for name in flags_of(row)]


def flagged_label(row, label):
    """A point's label, saying when its figure is not a steady measurement."""
    named = flags(row)
    return f"{label} ({', '.join(named)})" if named else label


def point_colour(row):
    """A point's colour: its framework's, else its image library's or runtime's (rows of neither: grey)."""
    for column in ("framework", "library", "runtime"):
        name = row.get(column)
        if pd.notna(name) and str(name):
            return colour(name)
    return "tab:grey"


# interval_plot's marks: the fill says whether the repeats agree, the shape whether the units were clean
UNIT_FLAGS = tuple(NAMES[name] for name in WITHDRAWING)


def point_marks(named):
    """The marker and face colour (None: the point's colour) of a point with these flags (FLAG_NOTES
    names): dlbench.flags.marker's, as compare's figure marks them."""
    return marker([name for name, word in NAMES.items() if word in named])


def interval_plot(frame, labels, value, low, high, path, title, xlabel, reference=None, reference_label=None):
    """One row per point: its value (dot) and its bootstrap interval (bar), in its framework's
    colour (or its library's, runtime's); a flagged point hollow (unstable) or a cross (short
    units, contended), the legend saying what each mark that appears means and the label naming
    the point's flags. `labels` is a Series of the points' names. `reference` draws a dotted
    line (1 for ratios), or a Series of them by framework, each in its colour;
    `reference_label` is its legend entry ("{}": the framework)."""
    if frame.empty:
        no_data(path, f"nothing to show: {title}")
        return
    rows = [row for _, row in frame.iterrows()]
    names = [flagged_label(row, label) for row, label in zip(rows, labels)]
    # the labels' width on top of the axis' own, so that long labels do not squeeze the points
    fig, ax = plt.subplots(figsize=(5 + 0.065 * max(map(len, names)), 2 + 0.35 * len(frame)), layout="constrained")
    for y, row in enumerate(rows):
        marker, face = point_marks(flags(row))
        ax.errorbar(row[value], y, xerr=[[row[value] - row[low]], [row[high] - row[value]]], fmt=marker,
                    color=point_colour(row), markerfacecolor=face, markersize=7, capsize=3)
    handles, texts = [], []
    references = (reference.items() if isinstance(reference, pd.Series)
                  else [] if reference is None else [(None, reference)])
    for name, at in references:
        line = ax.axvline(at, color="grey" if name is None else colour(name), linestyle=":")
        if reference_label:
            handles.append(line)
            texts.append(reference_label.format(name))
    seen = {name for row in rows for name in flags(row)}
    if "unstable" in seen:
        handles.append(Line2D([], [], marker="o", linestyle="none", color="dimgrey", markerfacecolor="white"))
        texts.append(f"hollow: {FLAG_NOTES['unstable']}")
    if seen & set(UNIT_FLAGS):
        handles.append(Line2D([], [], marker="X", linestyle="none", color="dimgrey"))
        texts.append("cross: " + "\ncross: ".join(FLAG_NOTES[name] for name in UNIT_FLAGS if name in seen))
    if handles:  # below the axis: never over a point
        fig.legend(handles, texts, loc="outside lower left", fontsize="small", frameon=False)
    ax.set_yticks(range(len(rows)), names)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    fig.suptitle(title)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def point_label(frame, columns):
    """'framework key=value ...' per row, from the columns that vary."""
    varying = [c for c in columns if c in frame and frame[c].nunique() > 1]
    return pd.Series([" ".join([str(row["framework"])] + [f"{c}={row[c]}" for c in varying])
                      for _, row in frame.iterrows()], index=frame.index, dtype=str)


def convergence_runs(runs):
    """The runs that trained the convergence segments (the first measurement.convergence_repeats
    repeats: the runs table's `segments`): what the models learned is compared among them alone,
    since a later repeat trains fewer steps from the same start. Where no run has a segment (a
    run set without convergence steps), every run trained alike: all of them."""
    carry = runs["segments"] > 0
    return (runs[carry] if carry.any() else runs).copy()


def loss_curves(convergence, units, path, title):
    """Every framework's training loss by step on one axis, in its colour: the convergence
    segments (from the shared start) and the timed units after them, each block's mean loss at
    its last step; the line the mean of the repeats, the band their range, over the runs that
    trained the segments (convergence_runs: where none did, every run); a line per precision
    (dlbench.precision) where the runs have more than one, each beside float32's. Blocks without a
    loss (loader benchmarks) are left out."""
    keys = ["framework", "run_id"]
    carried = convergence.loc[convergence["segment"].notna(), keys].drop_duplicates() if len(convergence) else []
    if len(carried):  # a later repeat's units would mix into its steps' mean as another run
        units = units.merge(carried, on=keys)
    columns = ["framework", "run_id", "precision", "step", "loss"]
    blocks = pd.concat([frame[frame["status"] == "ok"].reindex(columns=columns)
                        for frame in (convergence, units) if not frame.empty], ignore_index=True)
    blocks = blocks.dropna(subset=["step", "loss"])
    if blocks.empty:
        no_data(path, f"no training loss: {title}")
        return
    style = "precision" if blocks["precision"].nunique() > 1 else None
    grid = sns.relplot(data=blocks, x="step", y="loss", hue="framework", style=style, kind="line", marker="o",
                       errorbar=REPEATS_RANGE, palette=palette(blocks["framework"].unique()), height=3.5, aspect=1.6)
    grid.set(xlabel="training step (from the shared start)",
             ylabel="training loss, cross-entropy (nats)\nline: mean of the repeats, band: their range")
    save(grid, path, title)


def modes_figure(ratios, runs, path, title):
    """What each mode buys within its framework: steady throughput in the mode over the
    framework's default mode at the same point (ratio and interval; 1, dotted, is no change),
    each label with the point and the median compilation of both modes there (the runs
    table's compile_s, of the runs that compiled cold)."""
    if "mode" not in ratios or "mode" not in runs:
        no_data(path, "no run with an execution mode")
        return
    modes = ratios[ratios["framework"].fillna("").astype(str).ne("") & ratios["mode"].isna()
                   & ratios["comparison"].astype(str).str.fullmatch(r"[\w-]+ / [\w-]+")].reset_index(drop=True)
    columns = list(ratios.columns)
    keys = [k for k in columns[columns.index("framework") + 1:columns.index("ratio")] if k != "mode"]
    varying = [k for k in keys if modes[k].nunique() > 1]  # the label names only these: the rest is every point's

    def label(row):
        where = {k: row[k] for k in keys if pd.notna(row[k])}
        same = runs[(runs["framework"] == row["framework"])
                    & (runs[list(where)] == pd.Series(where)).all(axis=1)] if where else runs
        cold = same[same["compile_cache"] == "cold"]
        seconds = [cold.loc[cold["mode"] == m, "compile_s"].median() for m in row["comparison"].split(" / ")]
        spent = ", ".join(f"{s:.1f} s" if pd.notna(s) else "?" for s in seconds)
        point = " ".join(f"{k}={plain(v)}" for k, v in where.items() if k in varying)
        return " ".join(filter(None, (row["framework"], row["comparison"], point, f"(compilation {spent})")))

    interval_plot(modes, pd.Series([label(row) for _, row in modes.iterrows()], dtype=str), "ratio", "ci_low",
                  "ci_high", path, title,
                  "ratio: steady throughput in the mode / in the default mode; dot: mean, bar: bootstrap interval",
                  reference=1, reference_label="dotted: 1, no change")


SIXTEEN_BIT_RATIO = r"mixed-(?:bfloat16|float16) / float32"


def share_text(share):
    """A share as a percentage cut, not rounded, to a tenth: 0.999997 is 99.9%, never 100%."""
    return f"{math.floor(share * 1000) / 10:g}%"


def precision_figure(ratios, runs, path, title):
    """What a 16-bit precision buys within its framework: steady throughput under the policy over
    float32's at the same point (ratio and interval; 1, dotted, is no change), each label with the
    share of the model's forward FLOPs its runs measured in 16 bits (the runs table's
    precision_share_16bit, the least of its runs: dlbench.precision)."""
    if "precision" not in ratios or "precision" not in runs:
        no_data(path, "no run with a precision")
        return
    rows = ratios[ratios["comparison"].astype(str).str.fullmatch(SIXTEEN_BIT_RATIO)].reset_index(drop=True)
    columns = list(ratios.columns)
    keys = [k for k in columns[columns.index("framework") + 1:columns.index("ratio")] if k != "precision"]
    varying = [k for k in keys if rows[k].nunique() > 1]

    def label(row):
        policy = row["comparison"].split(" / ")[0]
        mine = runs[(runs["framework"] == row["framework"]) & (runs["precision"] == policy)]
        for k in varying:
            mine = mine[mine[k] == row[k]]
        share = mine["precision_share_16bit"].dropna().min() if "precision_share_16bit" in mine else float("nan")
        point = " ".join(f"{k}={plain(row[k])}" for k in varying if pd.notna(row[k]))
        measured = f"(measured: {share_text(share)} of its FLOPs in 16 bits)" if pd.notna(share) else "(not measured)"
        return " ".join(filter(None, (row["framework"], row["comparison"], point, measured)))

    interval_plot(rows, pd.Series([label(row) for _, row in rows.iterrows()], dtype=str), "ratio", "ci_low",
                  "ci_high", path, title,
                  "ratio: steady throughput in mixed precision / in float32; dot: mean, bar: bootstrap interval",
                  reference=1, reference_label="dotted: 1, no change")
