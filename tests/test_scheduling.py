"""Snakemake's scheduler kept quiet beside the timed runs (dlbench.scheduling)."""
import threading
import time

from snakemake.scheduling.job_scheduler import JobScheduler

from dlbench.scheduling import quiet_reevaluations


class Scheduler:
    """The part of Snakemake's JobScheduler the patch uses: its semaphore of scheduling rounds."""

    def __init__(self):
        self._open_jobs = threading.Semaphore(0)


def test_one_reevaluation_is_pending_at_a_time_and_never_holds_up_the_exit():
    class Patched(Scheduler):
        pass

    Patched._schedule_reevalutation = lambda self, delay: None
    assert quiet_reevaluations(Patched)
    scheduler = Patched()
    for _ in range(50):  # every finished job's round asks for one
        scheduler._schedule_reevalutation(0.2)
    assert scheduler._dlbench_pending_round.daemon
    time.sleep(0.5)
    assert scheduler._open_jobs.acquire(timeout=0.1)  # one round, once the timespan passed...
    assert not scheduler._open_jobs.acquire(timeout=0.3)  # ...not fifty
    scheduler._schedule_reevalutation(0.05)  # and the next one once that has run
    assert scheduler._open_jobs.acquire(timeout=1)


def test_the_snakemake_it_was_written_for_has_the_method_it_replaces():
    assert callable(getattr(JobScheduler, "_schedule_reevalutation", None))


def test_a_snakemake_without_it_runs_as_it_ships_and_says_so(capsys):
    assert not quiet_reevaluations(Scheduler)
    assert "_schedule_reevalutation" in capsys.readouterr().err
