"""Sequential repeats, on the question: how many processes each point gets.

Kalibera and Jones choose the repetitions at each level from the variance measured there; with
the noise between processes larger than within, more processes decide and more units barely
do. So the first `measurement.repeats` repeats of every timed point run for all of them
(interleaved across frameworks); then round after round, one more repeat runs only for the
points whose question is still open, or that lost a repeat to other processes, until each point
stops for one of STOPS:

- resolved: it owes no clean repeat (below), and every headline ratio it enters
  (dlbench.stats.comparisons: the frameworks side by side, one dimension within a framework) is
  decided: its interval lies above 1, below 1, or within 1 +- `same_threshold` (what `compare`
  calls same); an A/B's ratio (a variant over its framework, config variants) once it has a
  verdict of its own (dlbench.stats.change_verdict: beyond 1 +- `same_threshold`, or within it);
- max_repeats: it has `measurement.max_repeats` repeats;
- budget: the round's runs would take the adaptive phase past `measurement.budget_minutes`
  (the repeats after the first `repeats`, timed from their records' wall time; a point's next
  run is costed at the mean wall time of its runs so far). Within a round the points that owe a
  clean repeat go first, then those that enter the most open ratios per second of a run.

A repeat with a steady unit still contended after its run's reruns (measurement.max_contended_reruns)
is disturbed: its point sets it aside and decides from its clean repeats (dlbench.stats.set_aside),
and a point with fewer clean repeats than `repeats` owes one: the next round runs it again as a new
process, whatever its ratios say, within max_repeats (which counts every process) and the budget.
The plan says which repeats each point set aside (`set_aside`). Where every repeat of a point was
disturbed it sets none aside (it decides nothing, flagged contended) and owes them all.

`plan` is pure: the workflow's checkpoint (rules/runs.smk, scripts/plan_repeats.py) feeds it the
records so far and writes its answer, the next round's records, as a plan file.
"""
import re
from collections import Counter
from pathlib import PurePosixPath

import pandas as pd

from dlbench.sweep import duet_sides
from dlbench.stats import (change_verdict, comparison_interval, comparisons, disturbed_repeats, point_key, set_aside,
                           steady_points, variance_priors)
from dlbench.tables import units_table

STOPS = ("resolved", "max_repeats", "budget")
ANOTHER_ROUND = "another round"
REPEAT = re.compile(r"repeat~(\d+)")


def resolved(low, high, same_threshold):
    """A ratio's interval decides: faster, slower, or the same within the threshold."""
    if pd.isna(low) or pd.isna(high):
        return False
    return low > 1 or high < 1 or (low >= 1 - same_threshold and high <= 1 + same_threshold)


def decided(low, high, same_threshold):
    """An A/B ratio's interval decides (dlbench.stats.change_verdict): faster or slower beyond the
    threshold, or the same within it."""
    return change_verdict(low, high, same_threshold, 0) in ("faster", "slower", "same")


def with_repeat(path, repeat):
    """The record path of the same point at another repeat."""
    path = PurePosixPath(path)
    return str(path.with_name(REPEAT.sub(f"repeat~{repeat}", path.name)))


def open_ratios(units, same_threshold, confidence, resamples, seed, frameworks=None):
    """({point: how many of its ratios are open}, {point: its steady units}) of one run set's
    units table; a point is its group key (run set, framework, *point keys)."""
    _, groups, found = comparisons(units, frameworks)
    priors = variance_priors(groups.items())
    counts = Counter()
    for c in found:
        _, low, high = comparison_interval(c, groups, confidence, resamples, seed, priors)
        if not (decided(low, high, same_threshold) if c["ab"] else resolved(low, high, same_threshold)):
            counts.update([c["num"], c["den"]])
    return counts, groups


def owes_a_clean_repeat(point, measurement):
    """A plan's point lost a repeat to other processes and has fewer clean ones than `repeats`."""
    return point["clean_repeats"] < min(point["repeats"], measurement["repeats"])


def plan(records, round_, measurement, seed=0, frameworks=None):
    """The plan of round `round_` (its repeat number): which points run repeat `round_`, and why
    every other point stopped. records: [(path, record)] of every timed run set's runs so far.
    measurement: the config's measurement section (repeats, max_repeats, budget_minutes,
    same_threshold, confidence, resamples, min_unit_seconds, max_other_cpus).

    Returns {round, budget_s, spent_s, planned_s, records: [paths of repeat round_], points:
    [{run_set, subject, point, repeats, clean_repeats, set_aside, open_ratios, status}]}: repeats
    the processes with steady units, clean_repeats those with no contended unit, set_aside the
    repeats its statistics leave out; status ANOTHER_ROUND for the points that run again, else one
    of STOPS."""
    m = measurement
    by_set, path_of, wall = {}, {}, {}
    for path, record in records:
        by_set.setdefault(record["run_set"], []).append(record)
        path_of[(record["run_set"], record["framework"], record["run_id"])] = path
        # a duet's two records are one job's: each carries half of its wall time
        wall[path] = (record.get("wall_s") or 0.0) * (0.5 if duet_sides(path) else 1.0)
    spent = sum(s for path, s in wall.items() if int(REPEAT.search(path).group(1)) > m["repeats"])
    budget = 60.0 * m["budget_minutes"]
    points = []
    for run_set, set_records in by_set.items():
        units = units_table(set_records, m["min_unit_seconds"], m["max_other_cpus"])
        counts, groups = open_ratios(units, m["same_threshold"], m["confidence"], m["resamples"], seed, frameworks)
        open_counts = Counter({point_key(group): count for group, count in counts.items()})
        _, every = steady_points(units)  # every repeat, the set-aside ones included
        # keyed by point_key: NaN (a run of no framework, the image libraries') is not equal to itself
        every = {point_key(group): rows for group, rows in every.items()}
        for group in groups:
            rows = every[point_key(group)]
            run_ids = sorted(set(rows["run_id"]))
            framework = group[1] if isinstance(group[1], str) else None
            paths = [path_of[(run_set, framework, run_id)] for run_id in run_ids]
            points.append({
                "run_set": run_set, "subject": PurePosixPath(paths[0]).parent.name, "key": list(point_key(group)),
                "point": REPEAT.sub("repeat~*", run_ids[0]), "repeats": len(run_ids),
                "clean_repeats": len(run_ids) - len(disturbed_repeats(rows)), "set_aside": set_aside(rows),
                "open_ratios": open_counts.get(point_key(group), 0),
                "cost_s": sum(wall[p] for p in paths) / len(paths), "next": with_repeat(paths[0], round_),
            })
    for point in points:
        if point["open_ratios"] == 0 and not owes_a_clean_repeat(point, m):
            point["status"] = "resolved"
        elif point["repeats"] >= m["max_repeats"]:
            point["status"] = "max_repeats"
        elif round_ > m["max_repeats"]:  # open (or owing) with fewer repeats: earlier rounds had no budget for it
            point["status"] = "budget"
    waiting = sorted((p for p in points if "status" not in p),
                     key=lambda p: (not owes_a_clean_repeat(p, m), -p["open_ratios"] / max(p["cost_s"], 1e-3)))
    planned = 0.0
    for point in waiting:
        if spent + planned + point["cost_s"] <= budget:
            point["status"] = ANOTHER_ROUND
            planned += point["cost_s"]
        else:
            point["status"] = "budget"
    chosen = [p["next"] for p in points if p["status"] == ANOTHER_ROUND]
    # a duet's two sides run as one job: a side chosen brings the other
    chosen = list(dict.fromkeys(side for path in chosen for side in (duet_sides(path) or [path])))
    for point in points:
        point["cost_s"] = round(point["cost_s"], 3)
        del point["next"]
    return {"round": round_, "budget_s": budget, "spent_s": round(spent, 3), "planned_s": round(planned, 3),
            "records": sorted(chosen), "points": points}


def stopped(points, last_plan):
    """Why each row of a points table (dlbench.stats.point_statistics) has the repeats it has:
    its status in the last round's plan ("" for a point the plan does not know)."""
    status = {tuple(point["key"]): point["status"] for point in last_plan["points"]}
    keys = list(points.columns[:list(points.columns).index("repeats")])
    return [status.get(point_key(tuple(row)), "") for row in points[keys].itertuples(index=False)]
