"""What a flagged point is called, and what it may decide, wherever a number drawn from it is used:
the findings summary, the replication verdicts, `compare` and the figures (dlbench.plots).

The points and ratios tables carry dlbench.stats.FLAGS per point (a ratio: either side's):

- unstable: its units or its runs vary by more than the CV threshold. Its interval already
  carries that spread, so it still decides; every number from it is named unstable.
- below_minimum ("short units"): a steady unit was shorter than measurement.min_unit_seconds,
  so the clock's resolution and the step's own jitter weigh in it;
- contended: other processes used more than measurement.max_other_cpus cores during a steady
  unit, so it timed the neighbours as well;
- precision_not_followed: the run's measured precision (dlbench.precision: the share of its
  forward pass's FLOPs in 16 bits) is not the one its point requested, so it measured another
  precision than the point says.

The last three (WITHDRAWING) say the units were not a clean measurement: a verdict that rests on
such a point is not given (`not_resolved`): the figure still shows, named by its flags.
"""
import pandas as pd

from dlbench.stats import FLAGS, point_key, point_statistics

# The words every table, page and figure uses for a flag; the legends' sentences
NAMES = {"unstable": "unstable", "below_minimum": "short units", "contended": "contended",
         "precision_not_followed": "precision not followed"}
NOTES = {
    "unstable": "unstable: its units or runs vary by more than the CV threshold",
    "below_minimum": "short units: below measurement.min_unit_seconds",
    "contended": "contended: other processes used more than max_other_cpus during its units",
    "precision_not_followed": "precision not followed: its measured precision is not the one its point requested",
}
WITHDRAWING = ("below_minimum", "contended", "precision_not_followed")


def is_set(value):
    """A flag's cell as a bool: True, "True", "true", 1 or 1.0 (CSV round trips and missing
    values turn booleans into strings, floats or objects); NaN or missing is not set."""
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return False
    return str(value).strip().lower() in ("true", "1", "1.0")


def flags_of(row, suffix=""):
    """The FLAGS set in a row (a dict or Series; the columns `name + suffix`), in FLAGS' order."""
    return [name for name in FLAGS if is_set(row.get(name + suffix))]


def withdrawing(flags):
    """Of these flags (in any order, repeated or not), those that withdraw a verdict (short units,
    contended), each once."""
    return [name for name in WITHDRAWING if name in flags]


def named(flags):
    """'unstable, contended': the flags as every page names them ('' if none)."""
    return ", ".join(NAMES[name] for name in flags)


def not_resolved(flags):
    """The verdict of a comparison that rests on a contended or short-unit point, e.g.
    'not resolved (contended)'."""
    return f"not resolved ({named(withdrawing(flags))})"


def point_flags(units, cv_threshold=0.05):
    """(key columns, {point_key(values of those columns): the point's flags}) of every point with steady
    units in a units table, flagged as dlbench.stats.point_statistics flags them (the key columns:
    run set, framework and the point's keys). Only the flags are read: the intervals are drawn
    with the fewest resamples."""
    points = point_statistics(units, resamples=2, cv_threshold=cv_threshold)
    columns = list(points.columns[:points.columns.get_loc("repeats")])
    return columns, {point_key(tuple(row[c] for c in columns)): flags_of(row) for _, row in points.iterrows()}


def marker(flags):
    """A figure's mark for a point with these flags: (marker, face colour; None: the point's own):
    a cross where its units were not clean (contended, short units), hollow where it is unstable."""
    return ("X" if withdrawing(flags) else "o"), ("white" if "unstable" in flags else None)
