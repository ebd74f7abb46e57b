"""Statistics of the timed units: per point the median, IQR and a bootstrap interval; every
comparison as a ratio of medians with its interval; and a verdict per point between two
result sets.

All functions take a units table (results/tables/{workload}-units.csv, or several of them
concatenated with the same columns). Only steady units count: status "ok", not the warm-up
unit. Throughput (samples/s) is higher-is-faster everywhere, so a ratio above 1 is the
numerator being faster.
"""
import numpy as np
import pandas as pd
from scipy import stats as sps

NO_DIFFERENCE = "no difference within the noise"
# Within one framework: (dimension, numerator values (None: any but the baseline), baseline value, label).
DIMENSIONS = [
    ("grad", ["sparse"], "dense", lambda num: "sparse / dense grad"),
    ("devices", None, 1, lambda num: f"{num} / 1 devices"),
    ("input", ["synthetic"], "real", lambda num: "synthetic / real input"),
    ("workers", None, 0, lambda num: f"{num} / 0 workers"),
]


def point_keys(units):
    """The columns that identify a point within a workload and framework: those between run_id
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


def _groups(units):
    """{(workload, framework, *point keys): steady units} in the table's order."""
    keys = ["workload", "framework", *point_keys(units)]
    rows = steady(units)
    if rows.empty:
        return keys, {}
    return keys, {name: group for name, group in rows.groupby(keys, dropna=False, sort=False)}


def _interval(samples, combine, confidence, resamples, seed):
    """Percentile bootstrap interval of combine(median of each sample). Percentile rather than
    BCa: BCa gives NaN and warnings on the few, often tied units a point has. A sample without
    spread (one unit, or all equal) cannot vary, so it is held at its value; with none varying
    the interval is the value itself."""
    samples = [np.asarray(s, dtype=float) for s in samples]
    medians = [np.median(s) for s in samples]
    value = combine(*medians)
    if min(len(s) for s in samples) < 2:  # one sample says nothing of its spread: no interval
        return value, np.nan, np.nan
    varying = [i for i, s in enumerate(samples) if np.ptp(s) > 0]
    if not varying:
        return value, value, value

    def statistic(*resampled, axis=-1):
        parts = list(medians)
        for i, sample in zip(varying, resampled):
            parts[i] = np.median(sample, axis=axis)
        return combine(*parts)

    result = sps.bootstrap([samples[i] for i in varying], statistic, n_resamples=resamples,
                           confidence_level=confidence, method="percentile", paired=False, vectorized=True,
                           rng=np.random.default_rng(seed))
    return value, float(result.confidence_interval.low), float(result.confidence_interval.high)


def _cv(values):
    return np.std(values, ddof=1) / np.mean(values) if len(values) > 1 else np.nan


def _flags(group, cv_threshold):
    """(unstable, below minimum) of a point's steady units; one unit gives no CV, so not unstable."""
    return bool(_cv(group["samples_per_s"].to_numpy(dtype=float)) > cv_threshold), bool(
        _flag(group["below_minimum"]).any())


def point_statistics(units, confidence=0.95, resamples=2000, cv_threshold=0.05, seed=0):
    """One row per point with steady units: repeats, units, steps, the median throughput over
    all steady units of all repeats, its quartiles and IQR, a bootstrap interval of the median,
    the coefficient of variation and the unstable / below-minimum flags."""
    keys, groups = _groups(units)
    rows = []
    for name, group in groups.items():
        values = group["samples_per_s"].to_numpy(dtype=float)
        median, low, high = _interval([values], lambda m: m, confidence, resamples, seed)
        q25, q75 = np.percentile(values, [25, 75])
        unstable, below = _flags(group, cv_threshold)
        rows.append({
            **dict(zip(keys, name)),
            "repeats": group["repeat"].nunique(),
            "units": len(values),
            "steps": group["steps"].sum(),
            "median": median, "q25": q25, "q75": q75, "iqr": q75 - q25,
            "ci_low": low, "ci_high": high,
            "cv": _cv(values), "unstable": unstable, "below_minimum": below,
        })
    columns = keys + ["repeats", "units", "steps", "median", "q25", "q75", "iqr", "ci_low", "ci_high", "cv",
                      "unstable", "below_minimum"]
    return pd.DataFrame(rows, columns=columns)


ONE_SAMPLE = "one sample: no interval"


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


def ratios(units, confidence=0.95, resamples=2000, seed=0, frameworks=None, cv_threshold=0.05):
    """The headline ratios, median(A) / median(B) of steady throughput with a bootstrap interval
    (the steady units of each side resampled independently):

    - every pair of frameworks at the same point, each unordered pair once, the later framework
      (in `frameworks` order if given, else alphabetical) over the earlier;
    - within a framework, one dimension changed and the other keys equal: sparse / dense grad,
      N / 1 devices (one ratio per N-device strategy; the 1-device side whatever its strategy),
      synthetic / real input, W / 0 workers.

    The point keys that stay fixed are columns (NaN where they do not apply; the compared
    dimension is NaN, except strategy, which for device ratios is the N-device side's)."""
    keys, groups = _groups(units)
    point = keys[2:]
    rows = []

    def add(num, den, comparison, framework, fixed):
        ratio, low, high = _interval([groups[num]["samples_per_s"], groups[den]["samples_per_s"]],
                                     lambda a, b: a / b, confidence, resamples, seed)
        (num_unstable, num_below), (den_unstable, den_below) = (_flags(groups[n], cv_threshold) for n in (num, den))
        rows.append({
            "workload": num[0], "comparison": comparison, "framework": framework, **fixed,
            "ratio": ratio, "ci_low": low, "ci_high": high, "verdict": verdict(low, high),
            "unstable": num_unstable or den_unstable, "below_minimum": num_below or den_below,
        })

    # frameworks side by side at the same point; a key that only repeats the framework (the
    # image library of the decode benchmarks) does not tell points apart here
    rows_of = steady(units)
    alias = [k for k in point if (rows_of[k].astype(str) == rows_of["framework"].astype(str)).all()]
    by_point = {}
    for name in groups:
        at = tuple(_key([name[0], *(np.nan if k in alias else v for k, v in zip(point, name[2:]))]))
        by_point.setdefault(at, (name, {}))[1][name[1]] = name
    for first, names in by_point.values():
        order = _framework_order(list(names), frameworks)
        fixed = {k: (np.nan if k in alias else v) for k, v in zip(point, first[2:])}
        for i, den in enumerate(order):
            for num in order[i + 1:]:
                add(names[num], names[den], f"{num} / {den}", "", fixed)

    # one dimension within a framework
    index = {k: i for i, k in enumerate(keys)}
    for column, numerators, baseline, label in DIMENSIONS:
        if column not in point:
            continue
        ignored = {column, "strategy"} if column == "devices" else {column}
        for num in groups:
            value = num[index[column]]
            if pd.isna(value) or _same(value, baseline) or (numerators and value not in numerators):
                continue
            for den in groups:
                if not _same(den[index[column]], baseline) or any(
                        not _same(num[index[k]], den[index[k]]) for k in keys if k not in ignored):
                    continue
                fixed = {k: (np.nan if k in ignored else num[index[k]]) for k in point}
                comparison = label(plain(value))
                if column == "devices" and "strategy" in point:
                    fixed["strategy"] = num[index["strategy"]]
                    comparison += f" ({num[index['strategy']]})"
                add(num, den, comparison, num[1], fixed)

    columns = ["workload", "comparison", "framework", *point, "ratio", "ci_low", "ci_high", "verdict", "unstable",
               "below_minimum"]
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
    known = {"workload", "comparison", "framework", "ratio", "ci_low", "ci_high", "verdict", "unstable",
             "below_minimum"}
    where = " ".join(f"{k}={plain(v)}" for k, v in row.items() if k not in known and not pd.isna(v))
    who = f"{row['framework']} " if isinstance(row["framework"], str) and row["framework"] else ""
    flags = [name.replace("_", " ") for name in ("unstable", "below_minimum") if str(row.get(name)).lower() == "true"]
    interval = "" if pd.isna(row["ci_low"]) else f" [{row['ci_low']:.2f}, {row['ci_high']:.2f}]"
    line = (f"{row['workload']}{' ' + where if where else ''}: {who}{row['comparison']} steady throughput "
            f"{row['ratio']:.2f}{interval} {row['verdict']}")
    return line + (f" ({', '.join(flags)})" if flags else "")


def compare(old_units, new_units, threshold=0.05, alpha=0.05, confidence=0.95, resamples=2000, seed=0):
    """Every point with steady units in both tables: the old and new median throughput, new / old
    with a bootstrap interval, the two-sided Mann-Whitney U p-value of the steady units, and
    airspeed velocity's verdict: faster (slower) when p < alpha and the ratio is above 1 +
    threshold (below 1 / (1 + threshold)), else same. Points in one table only come last, with
    verdict "only in old" / "only in new"."""
    old_keys, old = _groups(old_units)
    new_keys, new = _groups(new_units)
    keys = old_keys + [k for k in new_keys if k not in old_keys]
    old_names = {_key(name): name for name in old}
    new_names = {_key(name): name for name in new}
    empty = {"old_median": np.nan, "new_median": np.nan, "ratio": np.nan, "ci_low": np.nan, "ci_high": np.nan,
             "p_value": np.nan}
    rows, only = [], []
    for key, name in old_names.items():
        where = dict(zip(old_keys, name))
        if key not in new_names:
            only.append({**where, **empty, "verdict": "only in old"})
            continue
        before = old[name]["samples_per_s"].to_numpy(dtype=float)
        after = new[new_names[key]]["samples_per_s"].to_numpy(dtype=float)
        ratio, low, high = _interval([after, before], lambda a, b: a / b, confidence, resamples, seed)
        p = sps.mannwhitneyu(after, before, alternative="two-sided").pvalue
        p = 1.0 if np.isnan(p) else float(p)  # no spread and no difference
        if p < alpha and ratio > 1 + threshold:
            call = "faster"
        elif p < alpha and ratio < 1 / (1 + threshold):
            call = "slower"
        else:
            call = "same"
        rows.append({**where, "old_median": np.median(before), "new_median": np.median(after), "ratio": ratio,
                     "ci_low": low, "ci_high": high, "p_value": p, "verdict": call})
    for key, name in new_names.items():
        if key not in old_names:
            only.append({**dict(zip(new_keys, name)), **empty, "verdict": "only in new"})
    return pd.DataFrame(rows + only, columns=keys + list(empty) + ["verdict"])


def _key(name):
    """A point's key that matches across tables: NaN equal to NaN, 2 equal to 2.0."""
    return tuple("<NA>" if pd.isna(v) else str(plain(v)) for v in name)
