"""A run that its cluster's scheduler stopped: SLURM's word on why, in the run's log and on the
invocation's end line.

When SLURM ends a job (scancel, its time limit, a preemption, a node failure) it sends SIGTERM to
every process of the job, and SIGKILL KillWait seconds later. The harness, stopped by a signal
inside a SLURM job (SLURM_JOB_ID set), asks SLURM (`scontrol show job`) whether the job is still
running: where it is not, the stop was the scheduler's, and the harness's last line in the run's
log says so and why (`stop_line`), e.g.

    <run id>: stopped by SLURM: job 12 TIMEOUT: its time limit (00:01:00, the job's runtime resource) ran out; ...

No record is written: Snakemake removes the outputs of a job its executor reports failed (the
SLURM plugin reports CANCELLED and TIMEOUT jobs so, and the profiles keep nothing incomplete), so
the run is "not run" and the next invocation runs it again. The end line names each such run and
SLURM's reason (`stop_lines`), from its log, or, where the job ended before the harness ran, from
the job's SLURM log (the plugin's `.snakemake/slurm_logs/rule_<rule>/<wildcards>/<job id>.log`,
where slurmstepd writes `*** JOB 12 ON node1 CANCELLED AT ... DUE TO TIME LIMIT ***`).
"""
import os
import re
import subprocess
from pathlib import Path

from dlbench.files import log_tail

STOPPED = "stopped by SLURM"
# SLURM's base job states of a job it ended (squeue's and scontrol's JobState), and what they say
ENDED = {
    "CANCELLED": "cancelled (scancel, by its user or an administrator)",
    "TIMEOUT": "its time limit ran out",
    "PREEMPTED": "preempted by a job of higher priority",
    "NODE_FAIL": "a node of the job failed",
    "BOOT_FAIL": "a node of the job failed to boot",
    "DEADLINE": "its deadline passed",
    "OUT_OF_MEMORY": "over its memory limit",
    "FAILED": "failed",
}
SCONTROL_TIMEOUT_S = 5  # well within KillWait (30 s by default), after which SLURM sends SIGKILL
LOG_TAIL_BYTES = 16384


def job_fields(job_id, runner=subprocess.run):
    """scontrol's fields of a job ({"JobState": "TIMEOUT", "Reason": "TimeLimit", ...}); {} where
    scontrol does not answer (no such job any more, no scontrol, the controller down)."""
    try:
        out = runner(["scontrol", "-o", "show", "job", str(job_id)], capture_output=True, text=True,
                     timeout=SCONTROL_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return {}
    if out.returncode != 0:
        return {}
    return dict(re.findall(r"(?:^|\s)(\w+)=(\S*)", out.stdout))


def describe(job_id, fields):
    """SLURM's reason for a job it ended, in words; None while the job runs (or SLURM says nothing)."""
    states = set(fields.get("JobState", "").split(","))
    reason = fields.get("Reason", "")
    base = next((state for state in ENDED if state in states), None)
    if base is None and "COMPLETING" in states:
        # the job's processes are being signalled: its base state under the COMPLETING flag
        base = "TIMEOUT" if reason == "TimeLimit" else "NODE_FAIL" if reason == "NodeDown" else "CANCELLED"
    if base is None:
        return None
    words = ENDED[base]
    if base == "TIMEOUT" and fields.get("TimeLimit"):
        words = f"its time limit ({fields['TimeLimit']}, the job's runtime resource) ran out"
    details = [f"{key}={fields[key]}" for key in ("Reason", "RunTime", "EndTime")
               if fields.get(key) not in (None, "", "None", "Unknown")]
    return f"{STOPPED}: job {job_id} {base}: {words}" + (f" ({', '.join(details)})" if details else "")


def slurm_stop(environ=None, runner=subprocess.run):
    """Why SLURM stops the job this process runs in, in words (`describe`); None outside a SLURM job
    or where the job still runs (a stop from elsewhere: Snakemake's, a user's kill)."""
    job_id = (os.environ if environ is None else environ).get("SLURM_JOB_ID")
    if not job_id:
        return None
    return describe(job_id, job_fields(job_id, runner))


def stop_line(run_id, why, signal_name):
    """The harness's last line in the run's log when SLURM stopped it (`stopped_in_log` reads it)."""
    return f"{run_id}: {why}; {signal_name} to the harness; the training was killed, no record written"


def log_path(record):
    """The rule's log of a record (rules/runs.smk: results/logs/runs/... beside results/runs/...)."""
    return Path(str(record).replace("results/runs/", "results/logs/runs/", 1)).with_suffix(".log")


def stopped_in_log(log):
    """SLURM's reason from the harness's stop line in a run's log; None where it has none."""
    found = re.findall(rf"^\S+: ({re.escape(STOPPED)}: .*?); SIG\w+ to the harness;", log_tail(log, LOG_TAIL_BYTES), re.M)
    return found[-1] if found else None


SLURMSTEPD = re.compile(r"\*\*\* JOB (\d+) ON (\S+) CANCELLED AT (\S+)( DUE TO [^*]+?)? \*\*\*")


def slurm_job_logs(record, rule="train", logdir=".snakemake/slurm_logs"):
    """The SLURM logs of a record's jobs (the executor plugin's layout: its wildcards' values joined
    by '_', a log per job id), newest last."""
    try:
        parts = Path(record).relative_to("results/runs").with_suffix("").parts
    except ValueError:  # not a record of this folder's results/runs
        return []
    folder = Path(logdir) / f"rule_{rule}" / "_".join(parts)
    return sorted(folder.glob("*.log"), key=lambda path: path.stat().st_mtime) if folder.is_dir() else []


def stopped_in_slurm_log(record, log):
    """slurmstepd's word on the record's newest SLURM job, where that job is newer than the run's log
    (it ended before the harness wrote its log, or killed the harness before it could say why)."""
    jobs = slurm_job_logs(record)
    if not jobs:
        return None
    newest = jobs[-1]
    if Path(log).exists() and Path(log).stat().st_mtime > newest.stat().st_mtime + 1:
        return None  # a later attempt ran (locally, or it wrote its log after the job's last word)
    found = SLURMSTEPD.findall(log_tail(newest, LOG_TAIL_BYTES))
    if not found:
        return None
    job, node, at, due = found[-1]
    base = "TIMEOUT" if "TIME LIMIT" in due else "NODE_FAIL" if "NODE FAILURE" in due else \
        "PREEMPTED" if "PREEMPTION" in due else "CANCELLED"
    return f"{STOPPED}: job {job} {base}: slurmstepd on {node} at {at}: CANCELLED{due} ({newest})"


def stop_reason(record):
    """Why SLURM stopped the run of a record that is not there, from its log or its SLURM log; None
    where neither says SLURM stopped it."""
    log = log_path(record)
    return stopped_in_log(log) or stopped_in_slurm_log(record, log)


def stop_lines(records):
    """The end line's lines for the runs without a record whose job SLURM stopped:
    `  not run: <record>: stopped by SLURM: job 12 TIMEOUT: ...` (rules/lifecycle.smk, report_runs)."""
    return [f"  not run: {record}: {why}" for record in records if (why := stop_reason(record))]
