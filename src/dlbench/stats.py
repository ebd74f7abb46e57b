"""Statistics of the timed units: per point its throughput and a bootstrap interval with the
process as the sample; every comparison as a ratio with its interval; and a verdict per point
between two result sets.

The units of one process share its placement, caches and neighbours: they are not independent
samples, the processes (repeats) are. So a point's throughput is the mean over its repeats of
each repeat's mean steady throughput, and the spread of its interval comes from a two-level
(hierarchical) bootstrap: resample the repeats, then the units within each resampled repeat
(Kalibera and Jones, "Rigorous benchmarking in reasonable time", 2013, who use this
estimator), with Student's t at the repeats' degrees of freedom (`interval`). One repeat
says nothing of the spread between processes: it has no interval. The points of one run set
lend each other their spread between processes (`variance_prior`, Smyth's empirical Bayes), so
that 3 repeats decide more than each point's own 2 degrees of freedom would. A repeat with a
steady unit still contended after the run's reruns timed its neighbours as well: a point that has
a clean repeat sets it aside and decides from its clean ones (`set_aside`; the adaptive rounds
measure it again: dlbench.rounds); one whose every repeat was contended keeps them, flagged.

All functions take a units table (results/tables/{run_set}-units.csv, or several of them
concatenated with the same columns). Only steady units count: status "ok", not the warm-up
units. Throughput (samples/s) is higher-is-faster everywhere, so a ratio above 1 is the
numerator being faster.
"""

import numpy as np
import pandas as pd
from scipy.special import digamma, polygamma
from scipy.stats import chi2, norm
from scipy.stats import t as student_t

from dlbench.frameworks import FRAMEWORKS

NO_DIFFERENCE = "no difference within the noise"
ONE_SAMPLE = "one repeat: no interval"
PRECISION_NOT_FOLLOWED = "no verdict: precision not followed"
AB = "variant"   # the point key of an A/B's variant (dlbench.spec_types.Run.sweep_point)
DUET = "duet"    # the point key of a duet's sides: the variant / framework ratio within the pair
# Within one framework: (dimension, numerator values (None: any but the baseline), the baseline
# value (framework -> value), label (numerator, baseline -> text)).
DIMENSIONS = [
    ("grad", ["sparse"], lambda fw: "dense", lambda num, base: "sparse / dense grad"),
    ("devices", None, lambda fw: 1, lambda num, base: f"{num} / 1 devices"),
    ("nodes", None, lambda fw: 1, lambda num, base: f"{num} / 1 nodes"),   # the same devices over N nodes, the same strategy
    ("input", ["synthetic", "resident"], lambda fw: "real", lambda num, base: f"{num} / real input"),
    ("input", ["synthetic"], lambda fw: "resident", lambda num, base: "synthetic / resident input"),  # the copies' cost
    ("workers", None, lambda fw: 0, lambda num, base: f"{num} / 0 workers"),
    ("library", None, lambda fw: "pillow", lambda num, base: f"{num} / pillow"),   # image libraries (runs of no framework)
    ("runtime", None, lambda fw: "pytorch", lambda num, base: f"{num} / pytorch"),  # the exported models' runtimes
    ("mode", None, lambda fw: FRAMEWORKS[fw].default_mode, lambda num, base: f"{num} / {base}"),  # e.g. compile / eager
    ("precision", None, lambda fw: "float32", lambda num, base: f"{num} / {base}"),  # mixed-bfloat16 / float32
    # A/B in one run (config variants): a variant over its framework as configured (no variant: NaN)
    (AB, None, lambda fw: np.nan, lambda num, base: f"{num} / as configured"),
]


def point_keys(units):
    """The columns that identify a point within a run set and framework: those between run_id
    and status, less repeat (repeats are samples of the same point)."""
    columns = list(units.columns)
    return [c for c in columns[columns.index("run_id") + 1:columns.index("status")] if c != "repeat"]


def _flag(series):
    # CSV round trips and missing values turn booleans into strings or objects
    return series.astype(str).str.strip().str.lower().isin(["true", "1", "1.0"])


def steady(units):
    """The units that count: of ok runs, after the warm-up, with a throughput."""
    keep = (units["status"] == "ok") & ~_flag(units["warmup"]) & units["samples_per_s"].notna()
    return units[keep]


def steady_points(units):
    """(key columns, {(run_set, framework, *point keys): steady units of every repeat}) in the
    table's order, the repeats `set_aside` would leave out included."""
    keys = ["run_set", "framework", *point_keys(units)]
    rows = steady(units)
    if rows.empty:
        return keys, {}
    return keys, {name: group for name, group in rows.groupby(keys, dropna=False, sort=False)}


# Why a repeat is set aside: a steady unit still contended after the run's reruns
# (measurement.max_contended_reruns): other processes took more than max_other_cpus cores during it
SET_ASIDE_REASON = "contended"


def disturbed_repeats(group):
    """The repeats (processes) of a point's steady units with a unit still contended after the run's
    reruns: each timed the other processes as well as the framework. Sorted repeat numbers."""
    if "contended" not in group:
        return []
    return sorted(int(plain(r)) for r in set(group.loc[_flag(group["contended"]), "repeat"]))


def set_aside(group):
    """The repeats a point leaves out of every statistic: its disturbed ones, where it has a clean
    repeat to decide from; none where every repeat was disturbed (the point keeps them all, flagged
    contended, and decides nothing: dlbench.flags)."""
    disturbed = disturbed_repeats(group)
    clean = {int(plain(r)) for r in group["repeat"]} - set(disturbed)
    return disturbed if clean else []


def without_set_aside(group):
    """A point's steady units less its set-aside repeats."""
    aside = set_aside(group)
    return group[~group["repeat"].isin(aside)] if aside else group


def set_aside_text(repeats):
    """The points table's set_aside cell: '2, 4 (contended)', '' for none."""
    return f"{', '.join(map(str, repeats))} ({SET_ASIDE_REASON})" if repeats else ""


def _groups(units):
    """{(run_set, framework, *point keys): steady units of its clean repeats (`set_aside`)} in the
    table's order: what every statistic, ratio and verdict reads."""
    keys, groups = steady_points(units)
    return keys, {name: without_set_aside(group) for name, group in groups.items()}


def repeats_of(group):
    """A point's steady throughputs, one array per repeat (process)."""
    return [g["samples_per_s"].to_numpy(dtype=float) for _, g in group.groupby("repeat", sort=True)]


def estimate(repeats):
    """The point's throughput: the mean over repeats of each repeat's mean."""
    return float(np.mean([r.mean() for r in repeats]))


def hierarchical_resamples(repeats, resamples, rng):
    """`resamples` bootstrap replicates of estimate(repeats): each draws as many repeats as there
    are, with replacement, and within each drawn repeat as many units as it has, with
    replacement (a repeat drawn twice gets two independent draws of its units)."""
    counts = np.array([len(r) for r in repeats])
    width = counts.max()
    units = np.zeros((len(repeats), width))  # one row per repeat, padded to the longest
    for row, values in zip(units, repeats):
        row[:len(values)] = values
    chosen = rng.integers(0, len(repeats), (resamples, len(repeats)))
    count = counts[chosen][..., None]
    # every slot draws `width` unit indices below its repeat's own count; those past the count
    # are padding and left out of the mean
    drawn = rng.integers(0, count, (resamples, len(repeats), width))
    values = np.where(np.arange(width) < count, units[chosen[..., None], drawn], 0.0)
    return (values.sum(axis=2) / count[..., 0]).mean(axis=1)


def _trigamma_inverse(x):
    """y with trigamma(y) = x: Newton's iteration from 0.5 + 1 / x (Smyth 2004; limma's trigammaInverse)."""
    if x > 1e7:
        return 1 / np.sqrt(x)
    if x < 1e-6:
        return 1 / x
    y = 0.5 + 1 / x
    for _ in range(50):
        tri = float(polygamma(1, y))
        step = tri * (1 - tri / x) / float(polygamma(2, y))
        y += step
        if -step / y < 1e-8:
            break
    return y


NO_PRIOR = (0.0, 0.0)  # (prior degrees of freedom, prior variance): each point's variance alone


def variance_prior(points):
    """(d0, s0^2): what the points of one run set say together of the variance between processes
    (of the log of a process's mean). With 3 repeats a point's own variance has 2 degrees of freedom
    and is itself noisy: a point whose 3 processes happened to agree gets an interval too narrow to
    trust, one whose processes happened to differ one too wide to decide. Smyth's empirical Bayes
    (2004; limma's squeezeVar, fitted by moments): the points' variances are taken as drawn from a
    scaled inverse chi-square of d0 degrees of freedom around s0^2, fitted to them; each point's
    variance is then moderated towards s0^2 as if it had d0 more degrees of freedom (`interval`).
    d0 is large where the points' variances agree (noise the run set shares), near 0 where they
    differ (each point keeps its own). points: each point's repeats (arrays of unit throughputs);
    those with fewer than 2 repeats or no spread say nothing. NO_PRIOR below 3 such points."""
    variances, freedoms = [], []
    for repeats in points:
        means = np.log([r.mean() for r in repeats])
        if len(means) >= 2 and np.var(means, ddof=1) > 0:
            variances.append(np.var(means, ddof=1))
            freedoms.append(len(means) - 1)
    if len(variances) < 3:
        return NO_PRIOR
    half = np.array(freedoms) / 2
    e = np.log(variances) - digamma(half) + np.log(half)
    excess = np.var(e, ddof=1) - float(np.mean(polygamma(1, half)))
    if excess <= 0:  # no more spread than sampling alone makes: one variance for all
        return np.inf, float(np.exp(e.mean()))
    d0 = 2 * _trigamma_inverse(excess)
    return float(d0), float(np.exp(e.mean() + digamma(d0 / 2) - np.log(d0 / 2)))


def variance_priors(groups):
    """{run set: variance_prior of its points}: one prior per run set (the noise of a run set's
    processes is alike; IMDB's is not MNIST's). groups: (group key, run set first; steady units) pairs."""
    by_run_set = {}
    for name, group in groups:
        by_run_set.setdefault(name[0], []).append(repeats_of(group))
    return {run_set: variance_prior(points) for run_set, points in by_run_set.items()}


def interval(sides, confidence, resamples, seed, prior=NO_PRIOR):
    """(value, low, high): the estimate of sides[0], or of sides[0] / sides[1], with its interval.

    The spread comes from the hierarchical bootstrap of each side (independently): the variance
    of its log replicates. With few repeats a percentile interval of those replicates is too
    narrow (a "95%" one held the truth in about 80% of simulated points at 3 repeats): the
    bootstrap's variance of a mean of n repeats is (n - 1) / n of the unbiased one, and n - 1
    degrees of freedom call for Student's t, not the normal. So each side's variance is widened
    by n / (n - 1), the sides' variances add on the log scale, and the interval is
    exp(log value +- t * sd), t with Welch-Satterthwaite's degrees of freedom (a simulated "95%"
    interval holds the truth in at least 93% of points from 3 repeats on: tests/test_stats.py).
    A side with one repeat has no interval (NaN). With a `prior` of the run set's variance between
    processes (`variance_prior`: d0, s0^2), each side's variance is moderated towards s0^2 / n as if
    its n - 1 degrees of freedom were n - 1 + d0, and so are Student's degrees of freedom."""
    rng = np.random.default_rng(seed)
    estimates = [estimate(r) for r in sides]
    value = estimates[0] / estimates[1] if len(sides) == 2 else estimates[0]
    if min(len(r) for r in sides) < 2:
        return value, np.nan, np.nan
    variances = [np.var(np.log(hierarchical_resamples(r, resamples, rng)), ddof=1) * len(r) / (len(r) - 1)
                 for r in sides]
    d0, s0 = prior
    if d0 > 0:
        variances = [s0 / len(r) if np.isinf(d0) else ((len(r) - 1) * v + d0 * s0 / len(r)) / (len(r) - 1 + d0)
                     for v, r in zip(variances, sides)]
    total = sum(variances)
    if total < 1e-20:  # units without spread: replicates that differ only by rounding
        return value, value, value
    freedom = np.inf if np.isinf(d0) else total ** 2 / sum(v ** 2 / (len(r) - 1 + d0) for v, r in zip(variances, sides))
    half = float(student_t.ppf((1 + confidence) / 2, freedom) * np.sqrt(total))
    return value, value * float(np.exp(-half)), value * float(np.exp(half))


def _cv(values):
    return np.std(values, ddof=1) / np.mean(values) if len(values) > 1 else np.nan


def within_cv(repeats):
    """The units' spread within a process: the mean over repeats of each repeat's CV."""
    cvs = [_cv(r) for r in repeats if len(r) > 1]
    return float(np.mean(cvs)) if cvs else np.nan


def between_cv(repeats):
    """The spread between processes: the CV of the repeats' means."""
    return _cv([r.mean() for r in repeats])


FLAGS = ["unstable", "below_minimum", "contended", "precision_not_followed"]


def _flags(group, cv_threshold):
    """A point's flags from its steady units: unstable when the units of its runs or the runs'
    means vary more than the threshold (CV; one unit gives no CV), below_minimum or contended
    when any unit is (tables.unit_rows)."""
    repeats = repeats_of(group)
    spread = np.nanmax([within_cv(repeats), between_cv(repeats), -np.inf])
    return {"unstable": bool(spread > cv_threshold),
            **{name: bool(_flag(group[name]).any()) if name in group else False for name in FLAGS[1:]}}


def point_statistics(units, confidence=0.95, resamples=2000, cv_threshold=0.05, seed=0):
    """One row per point with steady units: repeats, units, steps, the mean throughput (the
    mean of the repeats' means) with its hierarchical bootstrap interval, the median and
    quartiles of all its units, the CV within a run and between runs, the flags, and the repeats
    set aside (`set_aside`: disturbed ones, left out of all of it, e.g. '2 (contended)')."""
    keys, every = steady_points(units)
    groups = {name: without_set_aside(group) for name, group in every.items()}
    priors = variance_priors(groups.items())
    rows = []
    for name, group in groups.items():
        repeats = repeats_of(group)
        mean, low, high = interval([repeats], confidence, resamples, seed, priors[name[0]])
        values = group["samples_per_s"].to_numpy(dtype=float)
        q25, median, q75 = np.percentile(values, [25, 50, 75])
        rows.append({
            **dict(zip(keys, name)),
            "repeats": len(repeats),
            "units": len(values),
            "steps": group["steps"].sum(),
            "mean": mean, "ci_low": low, "ci_high": high,
            "median": median, "q25": q25, "q75": q75, "iqr": q75 - q25,
            "cv_within": within_cv(repeats), "cv_between": between_cv(repeats),
            **_flags(group, cv_threshold),
            "set_aside": set_aside_text(set_aside(every[name])),
        })
    columns = keys + ["repeats", "units", "steps", "mean", "ci_low", "ci_high", "median", "q25", "q75", "iqr",
                      "cv_within", "cv_between", *FLAGS, "set_aside"]
    return pd.DataFrame(rows, columns=columns)


def verdict(low, high):
    """A ratio of throughputs: faster or slower only when the whole interval says so."""
    if pd.isna(low) or pd.isna(high):
        return ONE_SAMPLE
    if low > 1:
        return "faster"
    if high < 1:
        return "slower"
    return NO_DIFFERENCE


def _same(a, b):
    return (pd.isna(a) and pd.isna(b)) or a == b


def _framework_order(names, frameworks):
    known = [f for f in (frameworks or []) if f in names]
    return known + sorted(set(names) - set(known))


def comparisons(units, frameworks=None):
    """The headline's comparisons of a units table, each {num, den: the two points' group keys,
    comparison (its text), compared, numerator, denominator (what it compares, as data: `framework`
    or the point key changed, and its value on either side), framework, fixed (the point keys that
    stay fixed)}:

    - every pair of frameworks at the same point, each unordered pair once, the later framework
      (in `frameworks` order if given, else alphabetical) over the earlier;
    - within a framework, one dimension changed and the other keys equal: sparse / dense grad,
      N / 1 devices (one ratio per N-device strategy; the 1-device side whatever its strategy),
      the same devices on N / 1 nodes,
      synthetic (or device) / real input, synthetic / device input (what copying each batch from
      the host costs), W / 0 workers, an image library / pillow.

    The point keys that stay fixed are NaN where they do not apply; the compared dimension is
    NaN, except strategy, which for device ratios is the N-device side's."""
    keys, groups = _groups(units)
    point = keys[2:]
    found = []

    # frameworks side by side at the same point, each in its default mode (named where there are modes)
    index = {k: i for i, k in enumerate(keys)}
    moded = "mode" in index
    by_point = {}
    for name in groups:
        if moded and name[index["mode"]] != FRAMEWORKS[name[1]].default_mode:
            continue
        # a variant meets its own framework only (below), a duet's side the other side only
        if any(key in index and not pd.isna(name[index[key]]) for key in (AB, DUET)):
            continue
        where = [v for k, v in zip(keys, name) if k not in ("framework", "mode")]
        by_point.setdefault(tuple(point_key(where)), (name, {}))[1][name[1]] = name
    for first, names in by_point.values():
        order = _framework_order(list(names), frameworks)
        fixed = {k: (np.nan if k == "mode" else v) for k, v in zip(point, first[2:])}
        for i, den in enumerate(order):
            for num in order[i + 1:]:
                comparison = (f"{num} ({FRAMEWORKS[num].default_mode}) / {den} ({FRAMEWORKS[den].default_mode})"
                              if moded else f"{num} / {den}")
                found.append(dict(num=names[num], den=names[den], comparison=comparison, compared="framework",
                                  numerator=num, denominator=den, framework="", fixed=fixed, ab=False, paired=False))

    # one dimension within a framework
    for column, numerators, baseline, label in DIMENSIONS:
        if column not in point:
            continue
        ignored = {column, "strategy"} if column == "devices" else {column}
        for num in groups:
            value = num[index[column]]
            base = baseline(num[1])
            if pd.isna(value) or _same(value, base) or (numerators and value not in numerators):
                continue
            for den in groups:
                if not _same(den[index[column]], base) or any(
                        not _same(num[index[k]], den[index[k]]) for k in keys if k not in ignored):
                    continue
                fixed = {k: (np.nan if k in ignored else num[index[k]]) for k in point}
                comparison = f"{plain(value)} / {num[1]}" if column == AB else label(plain(value), base)
                if column == "devices" and "strategy" in point:
                    fixed["strategy"] = num[index["strategy"]]
                    comparison += f" ({num[index['strategy']]})"
                found.append(dict(num=num, den=den, comparison=comparison, compared=column, numerator=plain(value),
                                  denominator=plain(base), framework=num[1], fixed=fixed, ab=column == AB,
                                  # a duet's two sides ran at the same time, pair by pair
                                  paired=column == AB and DUET in index and not pd.isna(num[index[DUET]])))
    return keys, groups, found


# A ratios row's comparison: its text, and what it compares as data (`ratios`)
SIDES = ["comparison", "compared", "numerator", "denominator"]


def ratios(units, confidence=0.95, resamples=2000, seed=0, frameworks=None, cv_threshold=0.05):
    """The headline ratios (`comparisons`), A / B of the points' throughputs (the mean of their
    repeats' means) with a hierarchical bootstrap interval (each side resampled independently),
    a verdict and the flags of either side. What a row compares is data beside its text (comparison):
    compared (`framework`, or the point key that changes: devices, mode, input, ...), numerator and
    denominator (that key's value on either side; the denominator of a variant is its framework as
    configured: empty), so that a reader selects rows without parsing the text."""
    keys, groups, found = comparisons(units, frameworks)
    priors = variance_priors(groups.items())
    point = keys[2:]
    rows = []
    for c in found:
        num, den = c["num"], c["den"]
        ratio, low, high = comparison_interval(c, groups, confidence, resamples, seed, priors)
        sides = [_flags(groups[n], cv_threshold) for n in (num, den)]
        rows.append({
            "run_set": num[0], **{key: c[key] for key in SIDES}, "framework": c["framework"], **c["fixed"],
            "ratio": ratio, "ci_low": low, "ci_high": high,
            # a side that measured another precision than its point's decides nothing (dlbench.precision)
            "verdict": PRECISION_NOT_FOLLOWED if any(side["precision_not_followed"] for side in sides)
            else verdict(low, high),
            **{name: any(side[name] for side in sides) for name in FLAGS},
        })
    columns = ["run_set", *SIDES, "framework", *point, "ratio", "ci_low", "ci_high", "verdict", *FLAGS]
    frame = pd.DataFrame(rows, columns=columns)
    frame[point] = frame[point].convert_dtypes()  # devices 2, not 2.0, beside the NaN of the compared dimension
    return frame


def plain(value):
    """2.0 -> 2 (integer keys come back from CSVs with NaN as floats)."""
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return int(value)
    return value


def describe(row):
    """One readable line of a ratios row, e.g. 'mnist model=small batch=256 devices=1: tensorflow /
    pytorch steady throughput 1.42 [1.35, 1.49] faster'."""
    known = {"run_set", *SIDES, "framework", "ratio", "ci_low", "ci_high", "verdict", *FLAGS}
    where = " ".join(f"{k}={plain(v)}" for k, v in row.items() if k not in known and not pd.isna(v))
    who = f"{row['framework']} " if isinstance(row["framework"], str) and row["framework"] else ""
    flags = [name.replace("_", " ") for name in FLAGS if str(row.get(name)).lower() == "true"]
    bounds = "" if pd.isna(row["ci_low"]) else f" [{row['ci_low']:.2f}, {row['ci_high']:.2f}]"
    line = (f"{row['run_set']}{' ' + where if where else ''}: {who}{row['comparison']} steady throughput "
            f"{row['ratio']:.2f}{bounds} {row['verdict']}")
    return line + (f" ({', '.join(flags)})" if flags else "")


NOT_RESOLVED = "not resolved at {} repeats"


def mean_variance(repeats, n):
    """Kalibera and Jones' variance of estimate() with n repeats of the m units a repeat has here
    (their mean count): between / n + within / (n m). Within: the mean of the repeats' unit
    variances; between: the variance of the repeats' means less the part within-run noise
    explains (within / m), not below 0. With one unit a repeat, within is unknown and the
    repeats' means carry it all."""
    m = np.mean([len(r) for r in repeats])
    spreads = [r.var(ddof=1) for r in repeats if len(r) > 1]
    within = float(np.mean(spreads)) if spreads else 0.0
    between = max(float(np.var([r.mean() for r in repeats], ddof=1)) - within / m, 0.0)
    return between / n + within / (n * m)


def paired(after, before):
    """Per repeat both sides ran (a duet's pairs: the same repeat number ran at the same time), the
    log of after's mean steady throughput over before's."""
    means = [{r: g["samples_per_s"].mean() for r, g in side.groupby("repeat")} for side in (after, before)]
    return np.array([np.log(means[0][r] / means[1][r]) for r in sorted(means[0].keys() & means[1].keys())])


def paired_interval(after, before, confidence):
    """(value, low, high) of after / before (steady units, with their repeat), taken pair by pair (a duet,
    config variants schedule: duet, where what the machine did in a pair it did to both sides): the
    ratio of the points' estimates, and Student's t interval of the pairs' mean log ratio around it,
    with n - 1 degrees of freedom. One pair: no interval."""
    value = estimate(repeats_of(after)) / estimate(repeats_of(before))
    logs = paired(after, before)
    if len(logs) < 2:
        return value, np.nan, np.nan
    half = float(student_t.ppf((1 + confidence) / 2, len(logs) - 1)) * logs.std(ddof=1) / np.sqrt(len(logs))
    return value, value * np.exp(-half), value * np.exp(half)


def comparison_interval(c, groups, confidence, resamples, seed, priors):
    """(value, low, high) of a comparison (`comparisons`): a duet's pair by pair (paired_interval),
    any other's from its sides' hierarchical bootstraps (interval)."""
    if c.get("paired"):
        return paired_interval(groups[c["num"]], groups[c["den"]], confidence)
    return interval([repeats_of(groups[c["num"]]), repeats_of(groups[c["den"]])], confidence, resamples, seed,
                    priors[c["num"][0]])


def comparison_repeats_needed(c, groups, threshold, confidence):
    """Repeats (pairs, for a duet) per side for an interval of the comparison within +-threshold."""
    if c.get("paired"):
        logs = paired(groups[c["num"]], groups[c["den"]])
        if len(logs) < 2:
            return None
        z = float(norm.ppf((1 + confidence) / 2))
        return max(2, int(np.ceil((z * logs.std(ddof=1) / np.log(1 + threshold)) ** 2)))
    return repeats_needed([repeats_of(groups[c["num"]]), repeats_of(groups[c["den"]])], threshold, confidence)


def repeats_needed(sides, threshold, confidence):
    """Repeats per side that would bring the half-width of the interval of new / old (sides:
    [new, old]) to at most `threshold`: z * ratio * sqrt(sum of mean_variance(side, n) / side^2)
    <= threshold (the delta method for a ratio), solved for n. None where a side has one repeat:
    it says nothing of the spread between processes."""
    if min(len(r) for r in sides) < 2:
        return None
    z = float(norm.ppf((1 + confidence) / 2))
    ratio = estimate(sides[0]) / estimate(sides[1])
    relative = sum(mean_variance(r, 1) / estimate(r) ** 2 for r in sides)  # of one repeat a side
    return max(2, int(np.ceil((z * ratio / threshold) ** 2 * relative)))


def change_verdict(low, high, threshold, repeats):
    """Did it change? new / old's interval: "faster" ("slower") only when all of it lies above
    1 + threshold (below 1 - threshold), "same" when all of it lies within 1 +- threshold, else
    "not resolved at N repeats" (N: the fewer of the two sides'); ONE_SAMPLE without an interval."""
    if pd.isna(low) or pd.isna(high):
        return ONE_SAMPLE
    if low > 1 + threshold:
        return "faster"
    if high < 1 - threshold:
        return "slower"
    if low >= 1 - threshold and high <= 1 + threshold:
        return "same"
    return NOT_RESOLVED.format(repeats)


def ab_verdicts(units, threshold=0.05, confidence=0.95, resamples=2000, seed=0):
    """The A/B of one run (config variants): at every point of a variant, variant / its framework
    (both interleaved in the same rounds, from the same weights and order), with its hierarchical
    bootstrap interval, a change_verdict and the repeats per side an interval within +-threshold
    would need."""
    keys, groups, found = comparisons(units)
    priors = variance_priors(groups.items())
    point = keys[2:]
    rows = []
    for c in (c for c in found if c["ab"]):
        after, before = repeats_of(groups[c["num"]]), repeats_of(groups[c["den"]])
        ratio, low, high = comparison_interval(c, groups, confidence, resamples, seed, priors)
        rows.append({"run_set": c["num"][0], "framework": c["framework"], AB: c["num"][keys.index(AB)],
                     **{k: v for k, v in c["fixed"].items() if k != AB},
                     "variant_mean": estimate(after), "framework_mean": estimate(before), "ratio": ratio,
                     "ci_low": low, "ci_high": high, "repeats": min(len(after), len(before)),
                     "repeats_needed": comparison_repeats_needed(c, groups, threshold, confidence),
                     "verdict": change_verdict(low, high, threshold, min(len(after), len(before)))})
    columns = ["run_set", "framework", AB, *[k for k in point if k != AB], "variant_mean", "framework_mean", "ratio",
               "ci_low", "ci_high", "repeats", "repeats_needed", "verdict"]
    table = pd.DataFrame(rows, columns=columns)
    table["repeats_needed"] = table["repeats_needed"].astype("Int64")
    return table


def compare(old_units, new_units, threshold=0.05, confidence=0.95, resamples=2000, seed=0):
    """Every point with steady units in both tables: the old and new throughput, new / old with
    its hierarchical bootstrap interval and a verdict: "faster" ("slower") only when the whole
    interval lies above 1 + threshold (below 1 - threshold), "same" when it lies within
    [1 - threshold, 1 + threshold], else "not resolved at N repeats" (N the fewer of the two
    sides'); and the repeats per side an interval within +-threshold would need. Points in one
    table only come last, with verdict "only in old" / "only in new"."""
    old_keys, old = _groups(old_units)
    new_keys, new = _groups(new_units)
    keys = old_keys + [k for k in new_keys if k not in old_keys]
    old_names = {point_key(name): name for name in old}
    new_names = {point_key(name): name for name in new}
    priors = variance_priors([*old.items(), *new.items()])  # a run set's points, before and after
    empty = {"old_mean": np.nan, "new_mean": np.nan, "ratio": np.nan, "ci_low": np.nan, "ci_high": np.nan,
             "repeats": None, "repeats_needed": None}
    rows, only = [], []
    for key, name in old_names.items():
        where = dict(zip(old_keys, name))
        if key not in new_names:
            only.append({**where, **empty, "verdict": "only in old"})
            continue
        before, after = repeats_of(old[name]), repeats_of(new[new_names[key]])
        ratio, low, high = interval([after, before], confidence, resamples, seed, priors[name[0]])
        call = change_verdict(low, high, threshold, min(len(before), len(after)))
        rows.append({**where, "old_mean": estimate(before), "new_mean": estimate(after), "ratio": ratio,
                     "ci_low": low, "ci_high": high, "repeats": min(len(before), len(after)),
                     "repeats_needed": repeats_needed([after, before], threshold, confidence), "verdict": call})
    for key, name in new_names.items():
        if key not in old_names:
            only.append({**dict(zip(new_keys, name)), **empty, "verdict": "only in new"})
    table = pd.DataFrame(rows + only, columns=keys + list(empty) + ["verdict"])
    table["repeats_needed"] = table["repeats_needed"].astype("Int64")
    table["repeats"] = table["repeats"].astype("Int64")
    return table


# Two invocations differ by more than either's interval knows: the machine between half-hours, the
# processes' placement, their allocators' history. An A/A of two default runs of one commit (issue 53)
# called 4 of 44 points 11-20% slower with intervals from each run's processes alone.
MIN_BETWEEN_POINTS = 8   # points with intervals needed to estimate the variance between runs
MAD_EFFICIENCY = 0.37    # the median absolute deviation's, against the standard deviation's, for normal data
BETWEEN_RUNS = "not resolved (between runs)"   # decided within each run, not across the two
BETWEEN_UNKNOWN = "not resolved (between runs: too few points to measure)"


def between_runs(table, threshold, confidence):
    """A compare() table (of one or several run sets, two invocations) whose intervals carry the
    variance between the two runs, and that variance's estimate as a CV.

    Each point's log(new / old) is its change plus the noise of its processes (its interval's
    spread) plus what differs between the two invocations for it. The last is measured from the
    points themselves (a random-effects model, by moments, made robust): tau^2 = (1.4826 x the
    median |log ratio|)^2, at its upper 95% bound, less the median within-run variance, centred on 0, so that a machine
    slower in one run counts as noise and a change confined to a few points stands out. Each
    interval is then widened to sqrt(its half-width^2 + (z tau)^2) on the log scale and judged
    again (change_verdict); a point decided only by its within-run interval says BETWEEN_RUNS.
    Below MIN_BETWEEN_POINTS points with intervals nothing can be told across the runs: every
    call becomes BETWEEN_UNKNOWN. A change that matters across runs is better measured as an A/B
    in one run (config variants)."""
    table = table.copy()
    z = float(norm.ppf((1 + confidence) / 2))
    known = table["ci_low"].notna() & table["ci_high"].notna() & (table["ratio"] > 0)
    logs = np.log(table.loc[known, "ratio"].astype(float))
    within = ((np.log(table.loc[known, "ci_high"].astype(float)) - np.log(table.loc[known, "ci_low"].astype(float)))
              / (2 * z)) ** 2
    calls = table["verdict"].isin(["faster", "slower", "same"])
    if known.sum() < MIN_BETWEEN_POINTS:
        table.loc[calls, "verdict"] = BETWEEN_UNKNOWN
        return table, np.nan
    # the median's estimate of a spread has the precision of about 0.37 n normal samples' (its
    # efficiency): its upper 95% bound is carried, so that a spread the points happen to understate
    # calls no point (a false "slower" is a defect; "not resolved" an honest answer)
    freedom = MAD_EFFICIENCY * known.sum()
    spread = (1.4826 * float(np.median(np.abs(logs)))) ** 2 * freedom / float(chi2.ppf(0.05, freedom))
    tau2 = max(spread - float(np.median(within)), 0.0)
    half = np.sqrt(within * z ** 2 + tau2 * z ** 2)
    table.loc[known, "ci_low"] = np.exp(logs - half)
    table.loc[known, "ci_high"] = np.exp(logs + half)
    for index in table.index[known]:
        call = change_verdict(table.at[index, "ci_low"], table.at[index, "ci_high"], threshold, table.at[index, "repeats"])
        table.at[index, "verdict"] = BETWEEN_RUNS if calls[index] and call.startswith("not resolved") else call
    return table, float(np.sqrt(np.exp(tau2) - 1))


def point_key(name):
    """A point's key that matches across tables: NaN equal to NaN, 2 equal to 2.0."""
    return tuple("<NA>" if pd.isna(v) else str(plain(v)) for v in name)
