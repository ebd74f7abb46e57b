"""Duet (Bulej et al., "Duet Benchmarking", ICPE 2020): the two sides of an A/B pair, a variant's run and
its framework's at the same point (config variants, schedule: duet), started at the same time, each
pinned to its half of the job's cores, so that whatever the machine does while they run, it does to
both. The ratio is then taken pair by pair, as the sequential A/B takes it round by round.

One harness process per side (dlbench.harness, without its lock: this process holds the machine's
training lock for the pair), each in its own interpreter, its output to its own log. The sides swap
halves with each repeat, so that neither side always has the same cores. A stop signal reaches both
sides; the exit status is the worse of theirs (a failed training is a failed record, not a failed job).

    python -m dlbench.duet --lock results/locks/training \\
        --side PYTHON SPEC OUT LOG ATTEMPT --side PYTHON SPEC OUT LOG ATTEMPT
"""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys

from dlbench.harness import STOP_SIGNALS, exclusive
from dlbench.processes import die_with_parent


def halves(cpus, repeat):
    """The job's CPUs in two halves (the first gets the smaller half of an odd count), swapped on even repeats."""
    cpus = sorted(cpus)
    first, second = cpus[:len(cpus) // 2], cpus[len(cpus) // 2:]
    return (first, second) if repeat % 2 else (second, first)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--side", nargs=5, action="append", required=True,
                        metavar=("PYTHON", "SPEC", "OUT", "LOG", "ATTEMPT"), help="one side of the pair (give two)")
    parser.add_argument("--lock", help="hold an exclusive lock on PATH-<host>.lock while the pair runs")
    args = parser.parse_args()
    if len(args.side) != 2:
        parser.error(f"a duet has two sides, got {len(args.side)}")
    cpus = os.sched_getaffinity(0)
    if len(cpus) < 2:
        raise SystemExit(f"dlbench.duet: a duet needs two CPUs or more, this job has {len(cpus)}")
    if not die_with_parent(signal.SIGTERM):
        raise SystemExit("the process that started this duet has ended")
    lock = exclusive(f"{args.lock}-{socket.gethostname()}.lock") if args.lock else None
    repeat = json.loads(args.side[0][1])["repeat"]
    sides = []
    for (python, spec, out, log, attempt), cores in zip(args.side, halves(cpus, repeat)):
        with open(log, "w") as log_file:  # its first line: where it ran (the terminal says nothing of it)
            print(f"duet: {json.loads(spec)['run_id']} on CPUs {','.join(map(str, cores))}", file=log_file, flush=True)
            sides.append(subprocess.Popen(
                [python, "-m", "dlbench.harness", "--spec", spec, "--out", out, "--attempt", attempt],
                stdout=log_file, stderr=subprocess.STDOUT,
                preexec_fn=lambda cores=cores: os.sched_setaffinity(0, cores)))

    def stop(signum, frame):
        for side in sides:
            side.send_signal(signum)

    for signum in STOP_SIGNALS:
        signal.signal(signum, stop)
    codes = [side.wait() for side in sides]
    if lock is not None:
        lock.close()
    sys.exit(max(codes, key=abs))


if __name__ == "__main__":
    main()
