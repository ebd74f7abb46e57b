"""Snakemake's scheduler kept quiet beside the timed runs (dlbench.scheduling)."""
import threading

from snakemake.scheduling.job_scheduler import JobScheduler

from dlbench.scheduling import quiet_reevaluations


class Scheduler:
    """The part of Snakemake's JobScheduler the patch uses: its semaphore of scheduling rounds."""

    def __init__(self):
        self._open_jobs = threading.Semaphore(0)


class Rounds:
    """A scheduler's _open_jobs that counts the rounds released, each release an event to wait on."""

    def __init__(self):
        self.released = 0
        self.changed = threading.Condition()

    def release(self):
        with self.changed:
            self.released += 1
            self.changed.notify_all()

    def wait_for(self, count, timeout_s=30):
        """True once `count` rounds were released; False if not within timeout_s (a generous deadline)."""
        with self.changed:
            return self.changed.wait_for(lambda: self.released >= count, timeout=timeout_s)


def test_one_reevaluation_is_pending_at_a_time_and_never_holds_up_the_exit():
    class Patched(Scheduler):
        pass

    Patched._schedule_reevalutation = lambda self, delay: None
    assert quiet_reevaluations(Patched)
    scheduler = Patched()
    scheduler._open_jobs = Rounds()
    # every finished job's round asks for one; a round due in a minute is pending throughout
    pending = set()
    for _ in range(50):
        scheduler._schedule_reevalutation(60.0)
        pending.add(scheduler._dlbench_pending_round)
    timers = [thread for thread in threading.enumerate()
              if isinstance(thread, threading.Timer) and thread.function == scheduler._open_jobs.release]
    assert len(pending) == len(timers) == 1, "more than one round pending"  # one timer, not fifty
    (timer,) = pending
    assert timer.daemon and timer.is_alive()
    timer.cancel()
    timer.join(timeout=30)
    assert not timer.is_alive() and scheduler._open_jobs.released == 0
    # that one ended: the next ask is a new round, released once its timespan passed
    scheduler._schedule_reevalutation(0.05)
    assert scheduler._dlbench_pending_round is not timer
    assert scheduler._open_jobs.wait_for(1), "the round was never released"
    scheduler._dlbench_pending_round.join(timeout=30)
    assert scheduler._open_jobs.released == 1


def test_the_snakemake_it_was_written_for_has_the_method_it_replaces():
    assert callable(getattr(JobScheduler, "_schedule_reevalutation", None))


def test_a_snakemake_without_it_runs_as_it_ships_and_says_so(capsys):
    assert not quiet_reevaluations(Scheduler)
    assert "_schedule_reevalutation" in capsys.readouterr().err
