"""What the harness's utilisation sampler (dlbench.monitor) costs beside a run: CPU seconds of the
sampling thread per minute of a framework's process, with the PSS read at every sample
(PSS_REFRESH_S = 0: as before 2026-11-28) and as the sampler reads it (where the tree's RSS sets
a new high, at least every PSS_REFRESH_S), alternating, and what one read of each kind costs.

    python benchmarks/sampler.py ~/.cache/dlbench/venvs/tensorflow-*/python tensorflow [--seconds 10 --pairs 3]

The process imports the framework (its libraries mapped, as a trainer's are) and holds; the
sampler runs in this process at the harness's interval (0.5 s)."""
import argparse
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from dlbench import monitor
from dlbench.harness import SAMPLE_INTERVAL_S


def thread_cpu_s():
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    return usage.ru_utime + usage.ru_stime


def sampled(pid, seconds, refresh_s):
    """CPU seconds the sampler's thread took sampling `pid` for `seconds`, and its PSS readings."""
    monitor.PSS_REFRESH_S = refresh_s
    spent = {}

    class Timed(monitor.UtilisationSampler):
        def run(self):
            start = thread_cpu_s()
            super().run()
            spent["cpu_s"] = thread_cpu_s() - start

    sampler = Timed(pid, SAMPLE_INTERVAL_S)
    sampler.start()
    time.sleep(seconds)
    samples = sampler.stop()
    return spent["cpu_s"], sum(pss is not None for pss in samples["pss_bytes"]), len(samples["t_s"])


def per_call_ms(call, n=100):
    start = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(n):
        call()
    end = resource.getrusage(resource.RUSAGE_SELF)
    return 1000 * (end.ru_utime + end.ru_stime - start.ru_utime - start.ru_stime) / n


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("python", help="a framework environment's interpreter")
    parser.add_argument("framework", help="the module it imports, e.g. tensorflow, torch, jax")
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args()
    held = subprocess.Popen([args.python, "-c", f"import {args.framework}; print(flush=True); import time; time.sleep(1e6)"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        held.stdout.readline()
        process = psutil.Process(held.pid)
        print(f"{args.framework}: RSS {process.memory_info().rss / 2 ** 20:.0f} MiB; one PSS read (smaps_rollup) "
              f"{per_call_ms(process.memory_full_info):.2f} ms CPU, one RSS read (statm) "
              f"{per_call_ms(process.memory_info):.3f} ms")
        figures = {0.0: [], monitor.PSS_REFRESH_S: []}
        for _ in range(args.pairs):
            for refresh_s, values in figures.items():
                cpu_s, reads, samples = sampled(held.pid, args.seconds, refresh_s)
                values.append(60 * cpu_s / args.seconds)
                print(f"  PSS_REFRESH_S={refresh_s:g}: {reads} PSS reads in {samples} samples, "
                      f"{60 * cpu_s / args.seconds:.2f} CPU-s a minute")
        for refresh_s, values in figures.items():
            print(f"PSS_REFRESH_S={refresh_s:g}: median {statistics.median(values):.2f} CPU-s a minute "
                  f"(range {min(values):.2f}-{max(values):.2f}, {len(values)} samples)")
    finally:
        held.kill()


if __name__ == "__main__":
    main()
