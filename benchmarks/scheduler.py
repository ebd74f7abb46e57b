"""What Snakemake's own scheduler costs beside a timed run: the CPU seconds the driver uses while
one job at a time holds the `training` resource and the others wait, as the default run's
training jobs do (each with a params function that reads a file and many code inputs, as a run's),
with Snakemake's scheduler as it ships and with dlbench.scheduling's one pending re-evaluation.

python benchmarks/scheduler.py --jobs 60 --seconds 2
"""
import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

SNAKEFILE = '''
{patch}
import glob
N = {jobs}
CODE = sorted(glob.glob("code/*.py"))
rule all:
    input: expand("done/{{i}}.txt", i=range(N))
rule wait:
    output: "done/{{i}}.txt"
    input: CODE
    params: value=lambda wildcards: open(CODE[0]).read()  # a params function that reads a file, as run_attempt
    threads: workflow.cores
    resources: training=1
    shell: "sleep {seconds} && touch {{output}}"
'''


PATCH = ("import sys; sys.path.insert(0, {src!r})\nfrom dlbench.scheduling import quiet_reevaluations\n"
         "from snakemake.scheduling.job_scheduler import JobScheduler\nquiet_reevaluations(JobScheduler)")
VARIANTS = {"stock": "", "quiet": PATCH.format(src=str(Path(__file__).resolve().parents[1] / "src"))}


def driver_cpu(folder):
    """(the driver's CPU seconds, wall seconds) of one invocation."""
    cmd = [sys.executable, "-m", "snakemake", "--cores", "2", "--resources", "training=1", "--scheduler", "greedy",
           "--quiet", "all"]
    start = time.perf_counter()
    proc = psutil.Popen(cmd, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cpu = 0.0
    while proc.poll() is None:
        try:
            times = proc.cpu_times()  # the driver alone, not its jobs' shells
            cpu = times.user + times.system
        except psutil.Error:
            break
        time.sleep(0.2)
    return cpu, time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=40)
    parser.add_argument("--seconds", type=float, default=3.0, help="each job's length")
    parser.add_argument("--inputs", type=int, default=30, help="code files each job takes as input")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    args = parser.parse_args()
    for variant in args.variants:
        with tempfile.TemporaryDirectory() as folder:
            Path(folder, "Snakefile").write_text(SNAKEFILE.format(patch=VARIANTS[variant], jobs=args.jobs,
                                                                  seconds=args.seconds))
            Path(folder, "code").mkdir()
            for i in range(args.inputs):
                Path(folder, "code", f"m{i:03d}.py").write_text("x = 1\n" * 50)
            cpu, wall = driver_cpu(folder)
            print(f"{variant}: {args.jobs} jobs of {args.seconds:g} s waiting in turn, driver CPU {cpu:.1f} s "
                  f"in {wall:.0f} s ({cpu / wall:.2f} cores)")


if __name__ == "__main__":
    main()
