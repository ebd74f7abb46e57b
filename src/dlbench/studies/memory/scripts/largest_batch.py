"""The largest batch that fits a memory limit, for one framework and mode: each batch tried is a
run of its own through the harness (dlbench.harness, under the limit: a run whose processes'
PSS, shared pages counted once, exceeds it is killed), its record kept; a batch fits when its run ends ok with a peak RSS
(the kernel's high-water mark of the training process) within the limit.

The search (next_step): batch 1, then 2, then along a line through the measured peaks (memory
grows about linearly with the batch), or the middle of the bracket after a batch killed over the
limit, always inside the bracket of the largest batch that fits and the smallest that does not,
until they are neighbours or max_batch fits.

python largest_batch.py --spec TEMPLATE_JSON --limit-mb L --max-batch M --max-trials N --trials DIR --out SUMMARY.json
"""
import argparse
import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

from dlbench.harness import OVER_LIMIT
from dlbench.record import read_record, write_json
from dlbench.specs import spec_from_dict, spec_to_json


def next_step(trials, limit_bytes, max_batch):
    """(the next batch to try, the kind of step it is), (None, None) when the search is done.
    trials: {batch: (fits, peak bytes or None)}, in the order tried. Batch 1, 2, then in turns:
    a guess on the line through the two batches nearest the limit (one on each side where both
    peaks are known, else the two largest that fit), then the guess's neighbour towards the limit,
    which closes the bracket when the guess was right. After a batch killed over the limit (its
    peak unknown: no line through it, and the line through the fits below overshot), the middle
    of the bracket, then a guess again."""
    fits = sorted(b for b, (ok, _) in trials.items() if ok)
    over = sorted(b for b, (ok, _) in trials.items() if not ok)
    low = fits[-1] if fits else 0
    high = over[0] if over else max_batch + 1
    if high - low <= 1:
        return None, None
    if not fits:
        return 1, "first"
    if len(fits) == 1:
        return min(2 * low, high - 1), "double"
    last = list(trials)[-1]
    last_kind = next_step(dict(list(trials.items())[:-1]), limit_bytes, max_batch)[1]
    if last == high and trials[high][1] is None:
        return (low + high) // 2, "middle"
    if last_kind == "guess":
        return (low + 1 if last == low else high - 1), "neighbour"
    if over and trials[high][1] is not None:
        (b1, p1), (b2, p2) = (low, trials[low][1]), (high, trials[high][1])
    else:
        (b1, p1), (b2, p2) = (fits[-2], trials[fits[-2]][1]), (low, trials[low][1])
    slope = (p2 - p1) / (b2 - b1)
    guess = b1 + math.floor((limit_bytes - p1) / slope) if slope > 0 else 2 * low
    return min(max(guess, low + 1), high - 1), "guess"


def next_batch(trials, limit_bytes, max_batch):
    """The next batch to try (next_step's), None when the search is done."""
    return next_step(trials, limit_bytes, max_batch)[0]


def peak_rss(record):
    """The training processes' peak RSS (each node's ru_maxrss, summed), None if any is missing."""
    peaks = record["memory"]["node_peak_rss_bytes"]
    return sum(peaks) if peaks and None not in peaks else None


def try_batch(template, batch, trials_dir, limit_mb, lock):
    """Run the template at `batch` under the limit; (its record's path, the record)."""
    spec = dataclasses.replace(template, batch=batch, run_id=f"{template.run_id}_batch~{batch}")
    out = Path(trials_dir) / f"batch~{batch}.json"
    cmd = [sys.executable, "-m", "dlbench.harness", "--spec", spec_to_json(spec), "--out", str(out),
           "--memory-limit-mb", str(limit_mb), *(["--lock", lock] if lock else [])]
    subprocess.run(cmd, check=True)
    return out, read_record(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--spec", required=True, help="the spec to vary, as JSON (its batch is replaced)")
    parser.add_argument("--limit-mb", type=int, required=True)
    parser.add_argument("--max-batch", type=int, required=True)
    parser.add_argument("--trials", required=True, help="the folder of the tried batches' records")
    parser.add_argument("--max-trials", type=int, required=True, help="the search stops after this many")
    parser.add_argument("--lock", help="the harness's lock (dlbench.harness --lock)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    template = spec_from_dict(json.loads(args.spec))
    limit_bytes = args.limit_mb * 2 ** 20
    trials, rows, reason = {}, [], None
    while (batch := next_batch(trials, limit_bytes, args.max_batch)) is not None and len(trials) < args.max_trials:
        path, record = try_batch(template, batch, args.trials, args.limit_mb, args.lock)
        peak = peak_rss(record)
        if record["status"] == "not_applicable":
            reason = record["error"]
            break
        over_limit = record["status"] == "failed" and OVER_LIMIT in (record["error"] or "")
        if record["status"] == "failed" and not over_limit:
            raise SystemExit(f"batch {batch} failed for another reason than memory (record {path}):\n{record['error']}")
        fits = record["status"] == "ok" and peak is not None and peak <= limit_bytes
        trials[batch] = (fits, peak)
        rows.append({"batch": batch, "fits": fits, "peak_rss_bytes": peak, "status": record["status"],
                     "record": str(path)})
        print(f"batch {batch}: {'fits' if fits else 'does not fit'} (peak RSS {peak})", file=sys.stderr)
    complete = reason is not None or next_batch(trials, limit_bytes, args.max_batch) is None
    fitting = [b for b, (ok, _) in trials.items() if ok]
    largest = max(fitting) if fitting else (None if reason else 0)
    write_json(args.out, {
        "framework": template.framework, "mode": template.mode, "model": dataclasses.asdict(template.model),
        "limit_mb": args.limit_mb, "max_batch": args.max_batch, "status": "not_applicable" if reason else "ok",
        "complete": complete,  # False: max_trials ended it before the bracket closed
        "reason": reason, "largest_batch": largest, "capped": largest == args.max_batch,
        "peak_rss_bytes": trials[largest][1] if fitting else None, "trials": rows,
    })


if __name__ == "__main__":
    main()
