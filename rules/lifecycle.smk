# The invocation's start and end: what it will cost (dlbench.estimate) before the first job, and in a
# dry run at its end; the venvs' check; the stop on SIGTERM or Ctrl-C; the end line; the report's lock.
import signal
import time

import psutil

from dlbench import disk, estimate as estimates
from dlbench.machine import cpu_model, gpus as machine_gpus
from dlbench.scheduler import log_path, stop_lines

STARTED = {}      # this invocation's start and its estimate (onstart), for the end line
NO_RECORDS = {}   # the planned files that were no record when this invocation started: path -> why


def planned_estimate(jobs):
    """The estimate of these Snakemake jobs from the earlier records of this machine (dlbench.estimate)."""
    history = estimates.load_history(config["estimate_from"] or ["results"],
                                     estimates.machine_key(cpu_model(), estimates.gpu_names(machine_gpus())))
    found = estimates.estimate([estimates.Job(job.rule.name, tuple(map(str, job.output)), job.benchmark and str(job.benchmark))
                                for job in jobs], history, PLAN.min_repeats, MEASUREMENT["budget_minutes"], PLAN.rounds)
    return found, estimates.lines(found, history)


def with_dry_run_estimate(execute):
    """A dry run ends with the runs it would run per run set and what they would cost (Snakemake runs no
    hook in a dry run)."""
    def run(*args, **kwargs):
        done = execute(*args, **kwargs)
        if workflow.dryrun and workflow.dag is not None and (jobs := list(workflow.dag.needrun_jobs(exclude_finished=False))):
            print("\n".join(planned_estimate(jobs)[1]), file=sys.stderr)
        return done

    return run


workflow.execute = with_dry_run_estimate(workflow.execute)


def check_venvs():
    """Before the first job: every built venv that a job of this invocation runs in is whole
    (dlbench.envs.venv_damage), or the invocation stops naming it and how to rebuild it."""
    from dlbench.envs import venv_damage

    wrappers = {str(path) for job in workflow.dag.needrun_jobs() for path in job.input
                if Path(path).name == "python" and Path(path).parent.parent == VENV_PREFIX}
    damaged = {wrapper: why for wrapper in sorted(wrappers)
               if Path(wrapper).exists() and (why := venv_damage(Path(wrapper).parent))}
    if damaged:
        lines = [f"  {Path(wrapper).parent}: {why}" for wrapper, why in damaged.items()]
        rebuild = " ".join(f"{Path(wrapper).parent}" for wrapper in damaged)
        raise WorkflowError("damaged venv(s), nothing was run:\n" + "\n".join(lines) +
                            f"\nrebuild: rm -r {rebuild} and run the same command again (the workflow "
                            "builds a missing venv; the jobs that ran in it then run again)")


def stop_jobs_on_sigterm():
    """SIGTERM, and Ctrl-C (SIGINT to the terminal's foreground group) alike, end the running jobs now
    and then the invocation, starting nothing new and keeping every finished output: Snakemake's own
    SIGTERM waits for the running jobs (minutes of training), where a container or a service manager
    sends SIGKILL after about 10 s, and its own SIGINT let the scheduler start the next job while it
    stopped. The harness, stopped, writes no record; Snakemake removes the outputs of the jobs it stopped."""
    graceful = signal.getsignal(signal.SIGTERM)  # the scheduler's: start nothing new

    def stop(signum, frame):
        print(f"{signal.Signals(signum).name}: stopping the running jobs; finished records are kept", file=sys.stderr)
        STARTED["stopped"] = signal.Signals(signum).name  # the end line: the jobs it ends were stopped
        for child in psutil.Process().children(recursive=True):
            try:
                child.terminate()
            except psutil.NoSuchProcess:
                pass
        if callable(graceful):
            graceful(signum, frame)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop)


def start():
    check_venvs()
    jobs = list(workflow.dag.needrun_jobs())
    outputs = [str(f) for job in jobs if job.rule.name in estimates.RUN_RULES for f in job.output]
    NO_RECORDS.update({path: why for path in outputs if (why := record_error(path))})
    found, lines = planned_estimate(jobs)
    STARTED.update(at=time.monotonic(), seconds=found.seconds if found.measured or found.analogous else None,
                   oom_kills=disk.oom_kills())
    if STARTED["seconds"] is not None:
        estimates.save(found)  # the console's time left (plugins/logger)
    else:
        Path(estimates.STATE).unlink(missing_ok=True)
    print("\n".join(lines), file=sys.stderr)
    if room := disk.room_warning("results", disk.planned_bytes(disk.job_paths(jobs), "results")):
        print(room, file=sys.stderr)  # the results' file system has less room than the jobs will write
    stop_jobs_on_sigterm()


def report_runs(fail):
    """Say how the configured runs stand: N ok, N not applicable, N failed (with the logs of
    the failed ones), and the time the invocation took beside its estimate; with fail (config
    fail_on_failed_runs), failed runs fail the invocation."""
    paths = [path for name in RUN_SETS for path in set_records(name, checked=False)]
    errors = {path: record_error(path) for path in paths}
    statuses = {path: "damaged" if errors[path] else (read_record(path) or {}).get("status") for path in paths}
    failed = [path for path, status in statuses.items() if status == "failed"]
    damaged = [path for path, status in statuses.items() if status == "damaged"]
    counts = {label: sum(1 for s in statuses.values() if s == status)
              for label, status in (("ok", "ok"), ("not applicable", "not_applicable"), ("failed", "failed"),
                                    ("no record (damaged)", "damaged"), ("not run", None))}
    lines = ["dlbench runs: " + ", ".join(f"{n} {label}" for label, n in counts.items()
                                           if n or label not in ("not run", "no record (damaged)"))]
    for path in failed:
        log = log_path(path)
        lines.append(f"  failed: {path} (log: {log if log.exists() else 'the record says why'})")
    for path, error in NO_RECORDS.items():
        if path not in damaged:
            lines.append(f"  run again, its file was no record: {error}")
    for path in damaged:
        lines.append(f"  no record: {errors[path]}")
    stopped = stop_lines([path for path, status in statuses.items() if status is None])  # SLURM ended their jobs
    lines += stopped
    if failed or damaged or stopped:
        lines.append("  the next invocation runs these runs again")
    # the jobs Snakemake saw fail, with why: want of space (path, free space), memory, a permission
    lines.extend(disk.failed_job_lines(getattr(workflow.scheduler, "failed", None) or (), STARTED.get("oom_kills"),
                                       STARTED.get("stopped")))
    if config["variants"] and Path("results/tables/ab.csv").exists():
        lines.append(ab_line(Path("results/tables/ab.csv")))
    if STARTED:
        took = time.monotonic() - STARTED["at"]
        guess = f"estimated {estimates.minutes(STARTED['seconds'])}" if STARTED["seconds"] is not None else "no estimate"
        lines.append(f"dlbench time: {estimates.minutes(took)} ({guess})")
    lines.append("dlbench report: snakemake --report results/report.html (with this invocation's --configfile), "
                 "then open results/report.html")
    print("\n".join(lines), file=sys.stderr)
    if fail and failed:
        raise WorkflowError(f"{len(failed)} run(s) failed (fail_on_failed_runs is set)")


def ab_line(table):
    """The A/B's verdicts in a line (results/tables/ab.csv, rules/report.smk's rule ab)."""
    import pandas as pd

    verdicts = pd.read_csv(table)["verdict"].str.replace(r"^not resolved.*$", "not resolved", regex=True)
    counts = verdicts.value_counts()
    return (f"dlbench A/B: {len(verdicts)} points: " + ", ".join(f"{n} {v}" for v, n in counts.items())
            + f" ({table}; the report opens on it)")


def report_when_no_run_holds_the_folder(create_report):
    """Snakemake's --report takes no lock: during a run it would gather tables the run has not
    yet rewritten, and say nothing. Wraps the workflow's create_report to stop, naming the lock."""
    def create(*args, **kwargs):
        locks = sorted(Path(".snakemake", "locks").glob("*.lock"))
        if locks:
            raise WorkflowError(
                f"a run holds this folder ({', '.join(map(str, locks))}): its tables are not final; "
                "build the report once it ends. No run going on (one was killed)? snakemake --unlock")
        return create_report(*args, **kwargs)

    return create


workflow.create_report = report_when_no_run_holds_the_folder(workflow.create_report)


onstart:
    start()


onsuccess:
    report_runs(fail=config["fail_on_failed_runs"])


onerror:
    report_runs(fail=False)
