"""One adaptive round (dlbench.rounds): read the timed records so far and write which points run
one more repeat (an open ratio, or a repeat set aside as contended to measure again), and why every
other point stopped.

python plan_repeats.py RECORD... --round 4 --measurement '{"repeats": 3, ...}' --out results/repeats/round-4.json
"""
import argparse
import json
import os
from pathlib import Path

from dlbench.rounds import ANOTHER_ROUND, plan
from dlbench.tables import load_records


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("records", nargs="*", help="the timed runs' records so far")
    parser.add_argument("--round", type=int, required=True, help="the repeat this round would run")
    parser.add_argument("--measurement", type=json.loads, required=True, help="the config's measurement section (JSON)")
    parser.add_argument("--seed", type=int, default=0, help="of the bootstrap")
    parser.add_argument("--frameworks", nargs="*", help="the configured order of the frameworks (ratio order)")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    invalid = []
    records = load_records(args.records, invalid=invalid)
    readable = [path for path in args.records if path not in {bad for bad, _ in invalid}]
    result = plan(list(zip(readable, records)), args.round, args.measurement, args.seed, args.frameworks)
    tmp = args.out.with_name(args.out.name + ".tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    os.replace(tmp, args.out)
    statuses = {}
    for point in result["points"]:
        statuses[point["status"]] = statuses.get(point["status"], 0) + 1
    set_aside = [f"{point['run_set']} {point['subject']} {point['point']}: {', '.join(map(str, point['set_aside']))}"
                 for point in result["points"] if point["set_aside"]]
    print(f"round {args.round}: {statuses.get(ANOTHER_ROUND, 0)} points run again "
          f"({result['planned_s']:.0f} s planned, {result['spent_s']:.0f} of {result['budget_s']:.0f} s spent); "
          + ", ".join(f"{n} {status}" for status, n in sorted(statuses.items()) if status != ANOTHER_ROUND)
          + (f"; repeats set aside as contended: {'; '.join(set_aside)}" if set_aside else ""))


if __name__ == "__main__":
    main()
