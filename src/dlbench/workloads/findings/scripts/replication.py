"""The survey's claims, each answered in one sentence from this run's tables:

1. compiling (a graph, XLA, torch.compile, a hybridized block) makes training faster than eager
   execution: every framework's compiled mode over its eager one, from the ratios tables;
2. MXNet uses less memory than TensorFlow: their peak RSS for the same model and batch, each in its
   default mode, from the memory pass;
3. treating each CPU core as a device (TensorFlow's MirroredStrategy over N CPU devices) beats one
   device with N threads: the ratios tables' N / 1 devices (mirrored).

python claims.py --ratios W-ratios.csv... --memory memory-peaks.csv --out survey-claims.csv
"""
import argparse
import os
import re
from pathlib import Path

import pandas as pd

from dlbench.frameworks import COMPILED, EAGER, FRAMEWORKS

COLUMNS = ["claim", "answer", "figures", "source"]


def interval(ratio, low, high):
    return f"{ratio:.2f}x" + ("" if pd.isna(low) else f" [{low:.2f}, {high:.2f}]")


def where(row, skip):
    """The point of a ratios row, key=value, the compared keys left out."""
    known = {"workload", "comparison", "framework", "ratio", "ci_low", "ci_high", "verdict", "unstable",
             "below_minimum", "contended", *skip}
    return " ".join(f"{k}={v}" for k, v in row.items() if k not in known and pd.notna(v))


def compiled_over_eager(ratios):
    """Rows (framework, workload, compiled mode, eager mode, speed-up, low, high, point): each ratio of
    a framework's modes of different kinds, as compiled / eager."""
    rows = []
    for _, row in ratios.iterrows():
        found = re.fullmatch(r"(\S+) / (\S+)", str(row["comparison"]))
        framework = row["framework"]
        if not found or not isinstance(framework, str) or framework not in FRAMEWORKS:
            continue
        kinds = dict(FRAMEWORKS[framework].modes)
        num, base = found.groups()
        if {kinds.get(num), kinds.get(base)} != {COMPILED, EAGER}:
            continue
        ratio, low, high = row["ratio"], row["ci_low"], row["ci_high"]
        if kinds[num] == EAGER:  # eager / compiled: turned round
            num, base, ratio, low, high = base, num, 1 / ratio, 1 / high, 1 / low
        rows.append({"framework": framework, "workload": row["workload"], "compiled": num, "eager": base,
                     "speedup": ratio, "low": low, "high": high, "point": where(row, {"mode"})})
    return pd.DataFrame(rows, columns=["framework", "workload", "compiled", "eager", "speedup", "low", "high",
                                       "point"])


def claim_compiling(ratios, sources):
    pairs = compiled_over_eager(ratios)
    if pairs.empty:
        return ("Compiling makes training faster than eager execution",
                "Not measured in this run: no framework ran a compiled and an eager mode of one point "
                "(the workloads' modes settings; config.yaml runs every mode on MNIST).", "", "")
    faster = pairs[pairs["low"] > 1]
    slower = pairs[pairs["high"] < 1]
    ordered = pairs.sort_values("speedup", ascending=False)
    figures = "; ".join(f"{r.framework} {r.compiled} / {r.eager} ({r.workload}): {interval(r.speedup, r.low, r.high)}"
                        for r in ordered.itertuples())
    best, worst = ordered.iloc[0], ordered.iloc[-1]
    answer = (f"Here compiling was faster in {len(faster)} of {len(pairs)} framework-mode pairs and slower in "
              f"{len(slower)} (the rest within the noise): from {best['framework']} {best['compiled']} at "
              f"{interval(best['speedup'], best['low'], best['high'])} its {best['eager']} speed to "
              f"{worst['framework']} {worst['compiled']} at {interval(worst['speedup'], worst['low'], worst['high'])}.")
    return "Compiling makes training faster than eager execution", answer, figures, sources


def claim_memory(peaks, source):
    title = "MXNet uses less memory than TensorFlow for the same model and batch"
    if peaks is None or peaks.empty:
        return title, "Not measured in this run: the memory pass (workload memory) did not run.", "", ""
    default = peaks[peaks.apply(lambda r: r["framework"] in FRAMEWORKS
                                and r["mode"] == FRAMEWORKS[r["framework"]].default_mode, axis=1)]
    mx = default[default["framework"] == "mxnet"].set_index(["workload", "batch"])
    tf = default[default["framework"] == "tensorflow"].set_index(["workload", "batch"])
    both = mx.join(tf, lsuffix="_mxnet", rsuffix="_tensorflow", how="inner")
    if both.empty:
        return title, "Not measured in this run: MXNet and TensorFlow share no point of the memory pass.", "", ""
    less = both[both["peak_rss_max_mib_mxnet"] < both["peak_rss_min_mib_tensorflow"]]
    more = both[both["peak_rss_min_mib_mxnet"] > both["peak_rss_max_mib_tensorflow"]]
    figures = "; ".join(f"{workload} batch {batch}: MXNet {r['peak_rss_mib_mxnet']:.0f} MiB vs TensorFlow "
                        f"{r['peak_rss_mib_tensorflow']:.0f} MiB" for (workload, batch), r in both.iterrows())
    slopes = both.dropna(subset=["mib_per_sample_mxnet", "mib_per_sample_tensorflow"]).groupby(level=0).first()
    per_sample = "; ".join(f"{w}: {r['mib_per_sample_mxnet']:.1f} vs {r['mib_per_sample_tensorflow']:.1f} MiB"
                           for w, r in slopes.iterrows())
    answer = (f"MXNet's training process peaked below TensorFlow's (every repeat) at {len(less)} of {len(both)} "
              f"points of the same model and batch, above it at {len(more)}"
              + (f"; a sample of the batch costs MXNet vs TensorFlow {per_sample}" if per_sample else "") + ".")
    return title, answer, figures, source


def claim_devices(ratios, sources):
    title = "TensorFlow gains by treating each CPU core as a device"
    mirrored = ratios[(ratios["framework"] == "tensorflow")
                      & ratios["comparison"].astype(str).str.fullmatch(r"\d+ / 1 devices \(mirrored\)")]
    if "mode" in mirrored:
        mirrored = mirrored[mirrored["mode"].isna() | (mirrored["mode"] == FRAMEWORKS["tensorflow"].default_mode)]
    if mirrored.empty:
        return (title, "Not measured in this run: TensorFlow ran no MirroredStrategy point on several CPU devices "
                       "(mnist.devices [1, 2] with strategies.tensorflow [mirrored]).", "", "")
    figures = "; ".join(f"{r['workload']} {where(r, {'devices', 'strategy'})}: {r['comparison']} "
                        f"{interval(r['ratio'], r['ci_low'], r['ci_high'])} ({r['verdict']})"
                        for _, r in mirrored.iterrows())
    first = mirrored.iloc[0]
    answer = (f"TensorFlow's MirroredStrategy over CPU devices gave "
              f"{interval(first['ratio'], first['ci_low'], first['ci_high'])} the throughput of one device with "
              f"the same threads ({first['comparison']}, {first['workload']}, "
              f"per-device batch: {first['verdict']}).")
    return title, answer, figures, sources


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ratios", nargs="*", default=[], help="the training workloads' ratios tables")
    parser.add_argument("--memory", nargs="*", default=[], help="the memory pass's peaks table (none: not run)")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    frames = [frame for frame in map(pd.read_csv, args.ratios) if len(frame)]
    ratios = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["workload", "comparison", "framework", "ratio", "ci_low", "ci_high", "verdict"])
    peaks = pd.read_csv(args.memory[0]) if args.memory else None
    sources = " ".join(Path(p).name for p in args.ratios)
    claims = [claim_compiling(ratios, sources), claim_memory(peaks, " ".join(Path(p).name for p in args.memory)),
              claim_devices(ratios, sources)]
    tmp = args.out.with_name(args.out.name + ".tmp")
    pd.DataFrame(claims, columns=COLUMNS).to_csv(tmp, index=False)
    os.replace(tmp, args.out)
    for claim, answer, _, _ in claims:
        print(f"{claim}: {answer}")


if __name__ == "__main__":
    main()
