"""Snakemake's scheduler, kept quiet beside a timed run (the Snakefile applies it).

Snakemake's job rate limiter (--max-jobs-per-timespan, 100/1s by default) starts a timer after
every scheduling round that runs another round one timespan later; each round re-evaluates the
params and resources of every waiting job and checks every input file of them. Each finished job
starts a new chain of such rounds, so the rounds per second grow with the jobs done: in a default
run whose training jobs wait for the one `training` resource, the driver used 0.48 cores of the
two after 70 runs (top; the units' `other_cpu_s` showed 0.2-0.6 cores taken from every timed
unit). `quiet_reevaluations` keeps one such timer at a time (a daemon, so that it never holds up
the driver's exit): the rate limit is still checked once a timespan, and a finished job still
starts its round at once.

This uses a private method of Snakemake's JobScheduler, written for WRITTEN_FOR: another version
without it runs Snakemake's own behaviour and says so.
"""
import sys
import threading

WRITTEN_FOR = "9.27.1"


def quiet_reevaluations(scheduler_class):
    """Patch JobScheduler so that at most one delayed re-evaluation is pending; True if applied."""
    if not hasattr(scheduler_class, "_schedule_reevalutation"):
        print(f"dlbench: Snakemake's JobScheduler has no _schedule_reevalutation (written for {WRITTEN_FOR}): "
              "its scheduler runs as it ships, and may take CPU from the timed runs", file=sys.stderr)
        return False

    def schedule_reevaluation(self, delay):
        pending = getattr(self, "_dlbench_pending_round", None)
        if pending is not None and pending.is_alive():
            return  # a round is already due within the timespan
        timer = threading.Timer(delay, self._open_jobs.release)
        timer.daemon = True
        self._dlbench_pending_round = timer
        timer.start()

    scheduler_class._schedule_reevalutation = schedule_reevaluation
    return True
