"""What this run found, the report's first view (report/workflow.rst includes it): the machine,
numerics and versions the numbers come from; per timed run set, the fastest framework at each
point with its interval (and the ones it is not separated from), and a forest plot of every
framework's steady throughput relative to one reference; the studies' claims with their verdicts
(the replication table), each beside the study's own published figure and its hardware
(studies.yaml); how close the training came to the machine, each point against the peak of the
precision it computed in (the matmul study's table); a workload's other model against its own on the
same data, framework by framework, and the framework that trains it fastest (scripts/models.py's
table: IMDB's Transformer against its LSTM). An HTML fragment, its figures inlined, its links opening
the report's figures.

Every number drawn from a flagged point or ratio (the tables' unstable, below_minimum,
contended: dlbench.flags) carries a mark naming its flags, a superscript such as
"[contended]", and a legend line below the list says what each mark that appears means.

python summary.py --sets mnist imdb ... --samples images reviews ... --points P... --ratios R...
    --runs R... --environment E... --replication findings-replication.csv [--mfu matmul-mfu.csv]
    [--models findings-models.csv --models-figure models.png]
    --figures results/figures/findings --out results/findings/summary.html
"""
import argparse
import base64
import html
import os
from pathlib import Path
from urllib.parse import quote

import pandas as pd

from dlbench.flags import NOTES, flags_of, named
from dlbench.frameworks import FRAMEWORKS
from dlbench.plots import interval_plot, share_text
from dlbench.stats import FLAGS, SIDES, plain

SUBJECTS = ("framework", "library", "runtime")   # what a run set's rows compare
NOT_KEYS = {"run_set", *SIDES, "mode", "ratio", "ci_low", "ci_high", "verdict", *FLAGS, *SUBJECTS}
VERDICT_CLASS = {"holds": "holds", "does not hold": "fails", "not resolved at these repeats": "open",
                 "not measured here": "absent"}


def subject_of(frame):
    """Each row's framework, library or runtime (the one column of them that is set)."""
    names = pd.Series("", index=frame.index, dtype=str)
    for column in SUBJECTS:
        if column in frame:
            names = names.where(names != "", frame[column].astype(object).where(frame[column].notna(), "").astype(str))
    return names


def point_keys(frame):
    # `stopped` is why a point's repeats stopped (the adaptive rounds), `set_aside` the repeats it left out:
    # properties of each subject's row, not of the point
    return [c for c in frame.columns if c not in NOT_KEYS
            and c not in {"repeats", "units", "steps", "mean", "median", "q25", "q75", "iqr", "cv_within", "cv_between",
                          "stopped", "set_aside"}]


def where(row, keys):
    return " ".join(f"{k}={plain(row[k])}" for k in keys if pd.notna(row[k]))


def in_default_mode(points):
    """Frameworks in their default mode; libraries and runtimes have none."""
    if "mode" not in points:
        return points
    return points[points.apply(lambda r: pd.isna(r.get("mode")) or r.get("framework") not in FRAMEWORKS
                               or r["mode"] == FRAMEWORKS[r["framework"]].default_mode, axis=1)]


def cross_rows(ratios):
    """The ratios rows that compare two subjects (SUBJECTS): numerator over denominator."""
    return ratios[ratios["compared"].isin(SUBJECTS)]


def ratio_between(cross, keys, point, a, b):
    """a / b at a point (ratio, low, high, flags), from either way round; None if not compared."""
    same = cross
    for k in keys:
        same = same[(same[k] == point[k]) | (same[k].isna() & pd.isna(point[k]))] if k in same else same
    for num, den, flip in ((a, b, False), (b, a, True)):
        hit = same[(same["numerator"] == num) & (same["denominator"] == den)]
        if len(hit):
            r = hit.iloc[0]
            flags = flags_of(r)
            return ((1 / r["ratio"], 1 / r["ci_high"], 1 / r["ci_low"], flags) if flip
                    else (r["ratio"], r["ci_low"], r["ci_high"], flags))
    return None


def fmt(value):
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.3g}"


def with_interval(value, low, high, number=fmt):
    """'12 [10, 14]', or the value said to be one sample."""
    if pd.isna(low) or pd.isna(high):
        return f"{number(value)} (one repeat: no interval)"
    return f"{number(value)} [{number(low)}, {number(high)}]"


def two(value):
    return f"{value:.2f}"


def mark(flags):
    """The mark after a number from a flagged point or ratio: its flags named, as a superscript
    whose tooltip is the legend's sentence ('' if none)."""
    if not flags:
        return ""
    notes = "; ".join(NOTES[name] for name in flags)
    return f'<sup class="flag" title="{html.escape(notes)}">[{html.escape(named(flags))}]</sup>'


def legend(flags):
    """The line that says what each mark means, for the flags that appear ('' if none does)."""
    if not flags:
        return ""
    return ("<p class=\"flags\"><small>Marks: " + "; ".join(
        f"<sup>[{html.escape(named([name]))}]</sup> {html.escape(NOTES[name].split(': ', 1)[1])}"
        for name in NOTES if name in flags) + " (the points and ratios tables' flag columns).</small></p>")


def leaders(points, ratios, sample, seen=None):
    """One sentence per point with two or more subjects: the fastest, its interval, and the ones
    whose ratio to it is within the noise; each number marked with its point's or ratio's flags
    (those that appear are added to the set `seen`)."""
    seen = set() if seen is None else seen
    points = in_default_mode(points).assign(subject=lambda f: subject_of(f))
    keys = [k for k in point_keys(points) if k != "subject"]
    cross = cross_rows(ratios)
    sentences = []
    groups = points.groupby(keys, dropna=False, sort=False) if keys else [((), points)]
    for _, group in groups:
        if group["subject"].nunique() < 2:
            continue
        ranked = group.sort_values("mean", ascending=False)
        best = ranked.iloc[0]
        tied, behind, apart = [], [], []
        for _, other in ranked.iloc[1:].iterrows():
            found = ratio_between(cross, keys, best, other["subject"], best["subject"])
            if found is None:   # a run set compares only with its reference (onnx's runtimes)
                apart.append(other["subject"])
                continue
            ratio, low, high, flags = found
            seen.update(flags)
            (tied if pd.isna(high) or high >= 1 else behind).append(
                f"{html.escape(other['subject'])} {html.escape(with_interval(ratio, low, high, two))}{mark(flags)}")
        point = where(best, keys)
        flags = flags_of(best)
        seen.update(flags)
        text = (f"<b>{html.escape(point or 'every point')}</b>: fastest {html.escape(best['subject'])}, "
                f"{html.escape(with_interval(best['mean'], best['ci_low'], best['ci_high']))}{mark(flags)} "
                f"{html.escape(sample)}/s")
        if tied:
            text += f"; <em>not resolved</em> against {', '.join(tied)} (their ratio to it)"
        if behind:
            text += f"; ahead of {', '.join(behind)}"
        if apart:
            text += f"; not compared with {html.escape(', '.join(apart))} (a lower mean)"
        sentences.append(text + ".")
    return sentences


def set_aside_line(sets, points_tables):
    """One paragraph naming the repeats the points set aside (the points tables' set_aside: a steady
    unit still contended after its run's reruns) and saying that those points decide from their clean
    repeats; '' where none was."""
    parts = []
    for name, points in zip(sets, points_tables):
        if "set_aside" not in points:
            continue
        keys = point_keys(points.assign(subject=lambda f: subject_of(f)))
        for _, row in points[points["set_aside"].fillna("").astype(str) != ""].iterrows():
            point = where(row, [k for k in keys if k != "subject"])
            parts.append(f"{name} {subject_of(row.to_frame().T).iloc[0]}{' ' + point if point else ''}: "
                         f"repeat {row['set_aside']}")
    if not parts:
        return ""
    return ("<p><b>Repeats set aside</b> (other processes took more than measurement.max_other_cpus cores "
            "during a steady unit, still after the run's reruns; each of these points decides from its clean "
            "repeats, and the adaptive rounds measure the repeat again within their budget): "
            + html.escape("; ".join(parts)) + ".</p>")


STATUS_TEXT = {"not_applicable": "not applicable", "failed": "failed", "absent": "not in this run set",
               "no steady units": "no steady units"}


def overview(sets, points_tables, ratios_tables, runs_tables, frameworks):
    """One row per framework and timed run set: its steady throughput at the run set's headline point
    (the point most frameworks ran, in their default modes and in float32) relative to the fastest there, with the
    interval of that ratio and the flags of its point and ratio; or why it has none (not applicable,
    failed, no steady units, not in this run set). Run sets that compare no frameworks are left out."""
    rows = []
    for name, points, ratios, runs in zip(sets, points_tables, ratios_tables, runs_tables):
        if "framework" not in points or points["framework"].isna().all():
            continue   # the image libraries' and the runtimes' run sets
        points = in_default_mode(points).assign(subject=lambda f: subject_of(f))
        if "precision" in points:
            points = points[points["precision"].isna() | (points["precision"] == "float32")]
        keys = [k for k in point_keys(points) if k != "subject"]
        groups = list(points.groupby(keys, dropna=False, sort=False)) if keys else [((), points)]
        if not groups:
            continue
        _, group = max(groups, key=lambda g: g[1]["subject"].nunique())
        best = group.sort_values("mean", ascending=False).iloc[0]
        point = where(best, keys)
        cross = cross_rows(ratios)
        here = runs
        for k in keys:
            if k in here:
                here = here[(here[k] == best[k]) | (here[k].isna() & pd.isna(best[k]))]
        for framework in frameworks:
            row = {"run_set": name, "point": point, "framework": framework, "fastest": best["subject"]}
            mine = group[group["subject"] == framework]
            if len(mine):
                mine = mine.iloc[0]
                flags = flags_of(mine)
                if framework == best["subject"]:
                    ratio, low, high = 1.0, float("nan"), float("nan")
                else:
                    ratio, low, high, ratio_flags = ratio_between(cross, keys, best, framework, best["subject"])
                    flags = [f for f in dict.fromkeys(flags + ratio_flags)]
                row.update(status="ok", samples_per_s=mine["mean"], ratio_to_fastest=ratio, ci_low=low, ci_high=high,
                           repeats=mine.get("repeats"), flags=named(flags))
            else:
                statuses = set(here.loc[here["framework"] == framework, "status"]) if "status" in here else set()
                status = next((s for s in ("failed", "not_applicable") if s in statuses),
                              "no steady units" if statuses else "absent")
                row.update(status=STATUS_TEXT[status], flags="")
            rows.append(row)
    columns = ["run_set", "point", "framework", "status", "samples_per_s", "ratio_to_fastest", "ci_low", "ci_high",
               "repeats", "fastest", "flags"]
    return pd.DataFrame(rows, columns=columns)


def overview_figure(table, samples, path):
    """Frameworks down, run sets across: each cell the framework's throughput over the fastest's at
    the run set's headline point (1: the fastest, its own rate said), its 95% interval, a mark where
    the point or ratio is flagged; a grey cell says why there is no number."""
    import matplotlib.pyplot as plt
    import numpy as np

    sets = list(dict.fromkeys(table["run_set"]))
    frameworks = list(dict.fromkeys(table["framework"]))
    grid = np.full((len(frameworks), len(sets)), np.nan)
    fig, ax = plt.subplots(figsize=(2.3 * len(sets) + 2.2, 0.62 * len(frameworks) + 1.8))
    for _, r in table.iterrows():
        i, j = frameworks.index(r["framework"]), sets.index(r["run_set"])
        if r["status"] != "ok":
            ax.text(j, i, r["status"].replace(" in this", "\nin this"), ha="center", va="center", fontsize=7,
                    color="#555")
            continue
        grid[i, j] = r["ratio_to_fastest"]
        flag = " *" if r["flags"] else ""
        if r["framework"] == r["fastest"]:
            text = f"fastest{flag}\n{fmt(r['samples_per_s'])} {samples.get(r['run_set'], 'samples')}/s"
        elif pd.isna(r["ci_low"]):
            text = f"{r['ratio_to_fastest']:.2f}{flag}\n(one repeat)"
        else:
            text = f"{r['ratio_to_fastest']:.2f}{flag}\n[{r['ci_low']:.2f}, {r['ci_high']:.2f}]"
        ax.text(j, i, text, ha="center", va="center", fontsize=7.5,
                color="white" if r["ratio_to_fastest"] < 0.45 else "black")
    shown = np.ma.masked_invalid(grid)
    cmap = plt.get_cmap("viridis").copy()
    cmap.set_bad("#eeeeee")
    image = ax.imshow(shown, cmap=cmap, vmin=0, vmax=1, aspect="auto")
    points = dict(zip(table["run_set"], table["point"]))
    ax.set_xticks(range(len(sets)), [f"{s}\n" + "\n".join(_wrap(points[s])) for s in sets], fontsize=7)
    ax.set_yticks(range(len(frameworks)), frameworks, fontsize=8)
    ax.tick_params(top=True, bottom=False, labeltop=True, labelbottom=False)
    ax.grid(False)
    fig.colorbar(image, ax=ax, fraction=0.04, pad=0.02, label="steady throughput / the fastest's")
    note = "in each run set's headline point; [95% interval of the ratio]; * a flagged point or ratio (the table's flags)"
    ax.set_xlabel(note, fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _wrap(text, width=26):
    lines, line = [], ""
    for word in str(text).split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return lines + ([line] if line else [])


def forest(ratios, points, path, title, sample):
    """Every subject's steady throughput over the run set's reference (the denominator of its
    first comparison), at each point, with its interval."""
    cross = cross_rows(ratios)
    if cross.empty:
        interval_plot(cross, pd.Series(dtype=str), "ratio", "ci_low", "ci_high", path, title, "")
        return None
    reference = cross.iloc[0]["denominator"]
    rows = cross[cross["denominator"] == reference].reset_index(drop=True)
    keys = [k for k in point_keys(rows) if rows[k].nunique() > 1]
    labels = rows["numerator"] + rows.apply(lambda r: f" ({where(r, keys)})" if keys else "", axis=1)
    interval_plot(rows.assign(framework=rows["numerator"]), labels.astype(str), "ratio", "ci_low", "ci_high", path,
                  f"{title}: how fast is each against {reference}?",
                  f"steady {sample}/s over {reference}'s (95% interval; 1, dotted: as fast)", reference=1)
    return reference


def machine(environments, runs):
    """One paragraph: CPU, GPUs, numerics, framework versions, commit."""
    env = pd.concat(environments, ignore_index=True)
    cpus = sorted(set(env["cpu"].dropna().astype(str)))
    flags = sorted(set(" ".join(env["cpu_flags"].dropna().astype(str)).split()))
    gpus = sorted(set(env["gpus"].dropna().astype(str)))
    versions = env.dropna(subset=["framework"]).drop_duplicates("framework")
    versions = ", ".join(f"{r['framework']} {r['framework_version']}" for _, r in versions.iterrows())
    libraries = env.dropna(subset=["library"]).drop_duplicates("library") if "library" in env else env.iloc[:0]
    libraries = ", ".join(f"{r['library']} {r['library_version']}" for _, r in libraries.iterrows())
    commits = sorted(set(env["git_commit"].dropna().astype(str).str[:10]))
    runs = pd.concat(runs, ignore_index=True)
    numerics = sorted(set(runs["numerics"].dropna().astype(str))) if "numerics" in runs else []
    cores = sorted(set(env["cpu_count"].dropna().astype(int).astype(str)))
    parts = [f"<b>CPU</b> {html.escape('; '.join(cpus))}, {'/'.join(cores)} cores "
             f"({html.escape(' '.join(f for f in flags if f.startswith('avx')))})",
             f"<b>GPUs</b> {html.escape('; '.join(gpus) or 'none')}",
             f"<b>numerics</b> {html.escape(', '.join(numerics) or 'not recorded')} (denormals)",
             f"<b>frameworks</b> {html.escape(versions)}"]
    if libraries:
        parts.append(f"<b>image libraries</b> {html.escape(libraries)}")
    parts.append(f"<b>commit</b> {html.escape(', '.join(commits))}")
    return "; ".join(parts) + "."


def precision_lines(sets, ratios_tables, runs_tables, frameworks, seen):
    """One line per 16-bit precision the run measured: its throughput over float32's, framework by
    framework, with the interval (the ratios tables' mixed-bfloat16 / float32 rows), the share of
    the forward pass's FLOPs that ran in 16 bits, and why a framework has none (not applicable)."""
    lines = []
    for policy, dtype in (("mixed-bfloat16", "bfloat16"), ("mixed-float16", "float16")):
        parts, reasons = [], {}
        for name, ratios, runs in zip(sets, ratios_tables, runs_tables):
            if "precision" not in runs or not (runs["precision"] == policy).any():
                continue
            mine = ratios[(ratios["compared"] == "precision") & (ratios["numerator"] == policy)
                          & (ratios["denominator"] == "float32")] if len(ratios) else ratios
            asked = runs[runs["precision"] == policy]
            for framework in frameworks:
                rows = mine[mine["framework"] == framework] if len(mine) else mine
                own = asked[asked["framework"] == framework]
                if len(rows):
                    r = rows.iloc[0]
                    flags = flags_of(r)
                    seen.update(flags)
                    share = own["precision_share_16bit"].dropna()
                    measured = f", {share_text(share.min())} of its FLOPs in {dtype}" if len(share) else ""
                    parts.append(f"{html.escape(framework)} {html.escape(with_interval(r['ratio'], r['ci_low'], r['ci_high'], two))}"
                                 f"{mark(flags)} ({html.escape(name)}{html.escape(measured)})")
                elif (own["status"] == "not_applicable").any():
                    reason = str(own.loc[own["status"] == "not_applicable", "error"].iloc[0])
                    reasons.setdefault(reason, []).append(framework)
        if not parts and not reasons:
            continue
        why = [f"{html.escape(', '.join(names))}: not applicable ({html.escape(reason)})" for reason, names in reasons.items()]
        lines.append(f"<p><b>{dtype} over float32 on this machine</b> (steady throughput, mixed {dtype} / float32, "
                     f"each run's measured precision): {'; '.join(parts + why)}.</p>")
    return lines


def peak_line(mfu_tables):
    """How close to the machine: the peak in each precision (the best matrix product that computed in
    it, its framework) and each run set's best model FLOP utilisation against the peak of the
    precision its point computed in (measured: the matmul study's table, results/tables/matmul-mfu.csv);
    '' without the table."""
    frames = [pd.read_csv(path) for path in mfu_tables]
    mfu = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if mfu.empty or "peak_precision" not in mfu:
        return ""
    named = {"mixed-bfloat16": "bfloat16", "mixed-float16": "float16"}
    rated = mfu.dropna(subset=["mfu"])
    order = {"float32": 0, "mixed-bfloat16": 1, "mixed-float16": 2}
    peaks = rated.drop_duplicates("peak_precision").sort_values("peak_precision", key=lambda p: p.map(order))
    peak_words = "; ".join(f"{named.get(r['peak_precision'], r['peak_precision'])} {r['peak_flop_s'] / 1e9:,.0f} "
                           f"GFLOP/s ({r['peak_framework']}'s product)" for _, r in peaks.iterrows())
    best = rated.loc[rated.groupby(["run_set", "peak_precision"])["mfu"].idxmax()] if len(rated) else rated
    best_words = "; ".join(f"{r['run_set']} {r['framework']} {r['point']}: "
                           f"{with_interval(100 * r['mfu'], 100 * r['mfu_low'], 100 * r['mfu_high'], lambda v: f'{v:.0f}%')} "
                           f"of the {named.get(r['peak_precision'], r['peak_precision'])} peak"
                           for _, r in best.iterrows())
    unrated = mfu[mfu["mfu"].isna()]
    missing = (f" No peak for {', '.join(sorted(set(unrated['precision_measured'].dropna().astype(str))))}: "
               f"{len(unrated)} points without a utilisation (no product of that precision ran)." if len(unrated) else "")
    return (f"<p><b>How close to the machine</b> (model FLOP utilisation: each training point's FLOP/s over the peak "
            f"of the precision it computed in, measured, not the one asked for; "
            f"{report_link('results/tables/matmul-mfu.csv', 'matmul-mfu.csv')}): peaks {html.escape(peak_words)}; "
            f"the best point per run set and precision: {html.escape(best_words)}.{html.escape(missing)}</p>")


def seconds(value):
    return f"{value:,.3g}"


def model_line(r, keys, sample, seen):
    """One framework's line of the models finding (a row of findings-models.csv)."""
    flags = flags_of(r)
    seen.update(flags)
    point = where(r, keys)
    mine = with_interval(r["samples_per_s"], r["ci_low"], r["ci_high"])
    theirs = with_interval(r["reference_samples_per_s"], r["reference_ci_low"], r["reference_ci_high"])
    ratio = with_interval(r["ratio"], r["ratio_ci_low"], r["ratio_ci_high"], two)
    text = (f"<b>{html.escape(r['framework'])}</b>{' (' + html.escape(point) + ')' if point else ''}: "
            f"{html.escape(mine)} against {html.escape(theirs)} {html.escape(sample)}/s, "
            f"{html.escape(ratio)}x{mark(flags)}: {html.escape(str(r['verdict']))}")
    if pd.isna(r["time_ratio"]):
        return f"{text}; no time to the target ({html.escape(str(r['time_verdict']))})"
    mine = with_interval(r["time_to_target_s"], r["time_ci_low"], r["time_ci_high"], seconds)
    theirs = with_interval(r["reference_time_to_target_s"], r["reference_time_ci_low"], r["reference_time_ci_high"],
                           seconds)
    ratio = with_interval(r["time_ratio"], r["time_ratio_ci_low"], r["time_ratio_ci_high"], two)
    return (f"{text}; to the target in {html.escape(mine)} against {html.escape(theirs)} s "
            f"({plain(r['steps_to_target'])} against {plain(r['reference_steps_to_target'])} steps), "
            f"{html.escape(ratio)}x{mark(flags)}: {html.escape(str(r['time_verdict']))}")


def models_section(table, points, ratios, samples, figure, seen):
    """The finding of a workload's other model against its own (scripts/models.py's table: IMDB's
    Transformer against its LSTM): per pair, a line per framework and point both ran, each in its
    default mode (its throughput against the own model's, their ratio with its interval and verdict;
    its time to the target against the own model's, their ratio likewise, or why there is none), then
    the framework that trains the other model fastest at each of its points (`leaders`, its run set's
    ratios), and the figure. Marks as everywhere (their flags added to `seen`); [] without rows."""
    table = in_default_mode(table) if len(table) else table
    if table.empty:
        return []
    # the point's keys but its mode (each framework's default here)
    keys = [c for c in table.columns[table.columns.get_loc("framework") + 1:table.columns.get_loc("samples_per_s")]
            if c != "mode"]
    parts = []
    for (other, own), rows in table.groupby(["run_set", "reference"], sort=False):
        sample = samples.get(other, "samples")
        target = next((str(t) for t in rows["target"].dropna() if str(t)), "the target")
        lines = "".join(f"<li>{model_line(r, keys, sample, seen)}.</li>" for _, r in rows.iterrows())
        fastest = leaders(points[other], ratios[other], sample, seen) if other in points else []
        other_, own_ = html.escape(other), html.escape(own)
        parts += [f"<h3 id=\"dlbench-models-{other_}\">{other_} against {own_}, on the same data</h3>",
                  f"<p>Framework by framework, each in its default mode, at the points both ran: {other_}'s steady "
                  f"throughput against {own_}'s, and its time to {html.escape(target)} against {own_}'s (the "
                  "convergence steps to it from the same start, times the point's steady time per step); each "
                  f"ratio {other_} / {own_}, with its interval "
                  f"({report_link('results/tables/findings-models.csv', 'findings-models.csv')}):</p>",
                  f"<ul>{lines}</ul>",
                  f"<p><b>Which framework trains {other_} fastest</b> (steady {html.escape(sample)}/s; each framework's "
                  "time to the target above):</p>",
                  "<ul>" + "".join(f"<li>{sentence}</li>" for sentence in fastest) + "</ul>" if fastest
                  else "<p>No point of it ran two frameworks.</p>"]
    if figure is not None and Path(figure).exists():
        parts.append(inline_png(figure, "each model against the workload's own, framework by framework"))
    return parts


def report_link(path, text):
    """A link that opens a figure of the report (its own showResultInfo, as Snakemake's rst links)."""
    return f"<a href=\"javascript:app.showResultInfo('{quote(str(path), safe='/')}')\">{html.escape(text)}</a>"


def link_down(anchor, text):
    """A link further down the findings (the report's own page, scrolled)."""
    return (f"<a href=\"#{anchor}\" onclick=\"document.getElementById('{anchor}').scrollIntoView(); return false;\">"
            f"{html.escape(text)}</a>")


def inline_png(path, alt):
    data = base64.b64encode(Path(path).read_bytes()).decode()
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(alt)}" style="max-width:100%">'


def replication_table(claims):
    rows = []
    for _, c in claims.iterrows():
        figure = report_link(c["figure"], Path(c["figure"]).name) if isinstance(c["figure"], str) and c["figure"] else ""
        rows.append(f"<tr><td>{html.escape(c['study'])}</td><td>{html.escape(c['claim'])}</td>"
                    f"<td class=\"{VERDICT_CLASS[c['verdict']]}\">{html.escape(c['verdict'])}</td>"
                    f"<td>{html.escape(str(c['figures']) if pd.notna(c['figures']) else '')}"
                    f"<br><small>{html.escape(c['criterion'])}</small></td>{study_cell(c)}<td>{figure}</td></tr>")
    study = "<th>the study's own figure beside this run's</th>" if "study_figure" in claims else ""
    return ("<table class=\"replication\"><tr><th>study</th><th>claim</th><th>this run's verdict</th>"
            f"<th>the figures behind it; the criterion</th>{study}<th>figure</th></tr>" + "".join(rows) + "</table>")


def study_cell(c):
    """The study's published figure (its hardware and versions) above this run's same quantity, or
    why this run cannot measure it (the replication table's study_figure, this_run_figure: studies.yaml);
    '' for a table without them."""
    if "study_figure" not in c:
        return ""
    text = lambda column: html.escape(str(c[column])) if pd.notna(c.get(column)) and str(c[column]) else ""
    return (f"<td><b>study</b>: {text('study_figure')}<br><small>on {text('study_hardware')}</small>"
            f"<br><b>this run</b>: {text('this_run_figure') or 'no figure of that quantity'}"
            f"<br><small>on {text('this_run_hardware')}</small></td>")


STYLE = """<style>
#dlbench-findings table { font-size: 0.8em; border-collapse: collapse; }
#dlbench-findings td, #dlbench-findings th { border: 1px solid #ddd; padding: 2px 4px; vertical-align: top; }
#dlbench-findings td.holds { background: #e3f4e3; } #dlbench-findings td.fails { background: #fbe3e3; }
#dlbench-findings td.open { background: #fdf5d8; } #dlbench-findings td.absent { color: #777; }
#dlbench-findings sup.flag { color: #b35900; cursor: help; }
/* Snakemake's landing column is narrow (max-w-lg): the findings take the room they need; and it
   centres the view vertically, which would cut off the top of a long one */
.max-w-lg:has(#dlbench-findings) { max-width: 64rem; }
.h-screen:has(#dlbench-findings) { align-items: flex-start; }
</style>"""


def summary(args):
    """The fastest at each point first, then the claims' verdicts, then the figures behind both."""
    claims = pd.read_csv(args.replication)
    environments, runs = list(map(pd.read_csv, args.environment)), list(map(pd.read_csv, args.runs))
    fastest, figures, seen = [], [], set()
    sets_points, sets_ratios = {}, {}
    args.figures.mkdir(parents=True, exist_ok=True)
    for name, sample, points, ratios in zip(args.sets, args.samples, args.points, args.ratios):
        points, ratios = pd.read_csv(points), pd.read_csv(ratios)
        sets_points[name], sets_ratios[name] = points, ratios
        figure = args.figures / f"ratios-{name}.png"
        forest(ratios, points, figure, name, sample)
        sentences = leaders(points, ratios, sample, seen) if len(points) else []
        fastest.append(f"<li>{html.escape(name)} ({html.escape(sample)}/s): "
                       + ("<ul>" + "".join(f"<li>{s}</li>" for s in sentences) + "</ul>" if sentences
                          else "no point ran two of them." if len(points) else "no run in this configuration.")
                       + "</li>")
        figures.append(inline_png(figure, f"{name}: throughput relative to the reference"))
    table = overview(args.sets, [pd.read_csv(p) for p in args.points], [pd.read_csv(r) for r in args.ratios], runs,
                     args.frameworks)
    args.overview.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.overview, index=False)
    at_a_glance = []
    if len(table):
        overview_figure(table, dict(zip(args.sets, args.samples)), args.figures / "overview.png")
        at_a_glance = ["<h3>Every framework on every run set</h3>",
                       inline_png(args.figures / "overview.png", "every framework against every run set"),
                       f"<p><small>The same as a table: {report_link(args.overview, args.overview.name)}.</small></p>"]
    precision = precision_lines(args.sets, [pd.read_csv(r) for r in args.ratios], runs, args.frameworks, seen)
    precision.append(peak_line(args.mfu))
    models = models_section(pd.read_csv(args.models) if args.models else pd.DataFrame(), sets_points, sets_ratios,
                            dict(zip(args.sets, args.samples)), args.models_figure, seen)
    parts = [STYLE, "<h2>What this run found</h2>", *at_a_glance, f"<p>{machine(environments, runs)}</p>", *precision,
             "<p>Steady throughput: each point's mean over its repeats (separate processes) with its 95% "
             "hierarchical bootstrap interval; ratios with theirs. Frameworks in their default modes.</p>",
             f"<p><b>The studies' {len(claims)} claims</b> ({link_down('dlbench-claims', 'below')}): "
             + ", ".join(f"{n} {html.escape(verdict)}" for verdict, n in claims["verdict"].value_counts().items())
             + ".</p>",
             "<h3>The fastest at each point</h3>", "<ul>" + "".join(fastest) + "</ul>", *models, legend(seen),
             set_aside_line(args.sets, [pd.read_csv(p) for p in args.points]),
             "<h3 id=\"dlbench-claims\">The studies' claims: this run's verdicts</h3>",
             "<p>Each verdict is computed from this run's tables by the criterion beside it "
             f"({report_link('results/tables/findings-replication.csv', 'the replication table')}).</p>",
             replication_table(claims),
             "<h3>Every framework against the reference</h3>", *figures]
    return "<div id=\"dlbench-findings\">" + "\n".join(parts) + "</div>\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sets", nargs="+", required=True, help="the timed run sets")
    parser.add_argument("--samples", nargs="+", required=True, help="each set's sample (images, reviews)")
    parser.add_argument("--points", nargs="+", required=True, help="each set's points table")
    parser.add_argument("--ratios", nargs="+", required=True, help="each set's ratios table")
    parser.add_argument("--runs", nargs="+", required=True, help="the runs tables (numerics)")
    parser.add_argument("--environment", nargs="+", required=True, help="the environment tables")
    parser.add_argument("--replication", required=True)
    parser.add_argument("--mfu", nargs="*", default=[], help="the matmul study's utilisation table (none: no matmul)")
    parser.add_argument("--figures", required=True, type=Path, help="folder of the forest plots")
    parser.add_argument("--models", type=Path, help="each model against its workload's own (findings-models.csv)")
    parser.add_argument("--models-figure", type=Path, help="its figure, inlined")
    parser.add_argument("--frameworks", nargs="+", required=True, help="the configured frameworks, in order")
    parser.add_argument("--overview", required=True, type=Path, help="the framework x run set table to write")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    if not len(args.sets) == len(args.samples) == len(args.points) == len(args.ratios):
        parser.error("--sets, --samples, --points and --ratios need one entry per run set")
    page = summary(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(args.out.name + ".tmp")
    tmp.write_text(page)
    os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
