"""dlbench.scheduler: SLURM's reason for a job it ended, as the harness writes it in the run's log
and the end line reads it back. Quick: scontrol's answers are given; tests/test_slurm.py ends real
jobs on a real slurmctld (scancel, a time limit)."""
import os
import subprocess
import time

from dlbench.scheduler import (describe, log_path, slurm_stop, stop_line, stop_lines, stopped_in_log,
                               stopped_in_slurm_log)

RUN = "model~large_duplicate~1_batch~64_devices~1_nodes~1_strategy~none_mode~eager_precision~float32_repeat~1"
RECORD = f"results/runs/mnist/pytorch/{RUN}.json"


def scontrol(stdout, returncode=0):
    def run(cmd, **kwargs):
        assert cmd[:4] == ["scontrol", "-o", "show", "job"]
        return subprocess.CompletedProcess(cmd, returncode, stdout, "")

    return run


def test_slurms_states_of_a_job_it_ended_in_words():
    timeout = describe("12", {"JobState": "TIMEOUT", "Reason": "TimeLimit", "TimeLimit": "00:01:00", "RunTime": "00:01:04"})
    assert timeout == ("stopped by SLURM: job 12 TIMEOUT: its time limit (00:01:00, the job's runtime resource) ran out "
                       "(Reason=TimeLimit, RunTime=00:01:04)")
    assert describe("12", {"JobState": "CANCELLED", "Reason": "None"}).startswith("stopped by SLURM: job 12 CANCELLED: cancelled")
    # while SLURM signals the job's processes its state shows the COMPLETING flag: the reason tells
    assert " TIMEOUT: " in describe("3", {"JobState": "COMPLETING", "Reason": "TimeLimit", "TimeLimit": "00:01:00"})
    assert " CANCELLED: " in describe("3", {"JobState": "COMPLETING", "Reason": "None"})
    assert " CANCELLED: " in describe("3", {"JobState": "CANCELLED,COMPLETING"})
    assert " NODE_FAIL: " in describe("3", {"JobState": "NODE_FAIL"})
    assert describe("3", {"JobState": "RUNNING", "Reason": "None"}) is None  # a stop from elsewhere
    assert describe("3", {}) is None  # scontrol said nothing


def test_the_stop_is_slurms_only_inside_a_slurm_job_that_slurm_ends():
    line = ("JobId=12 JobName=x UserId=root(0) GroupId=root(0) Priority=1 JobState=TIMEOUT Reason=TimeLimit "
            "Dependency=(null) RunTime=00:01:04 TimeLimit=00:01:00 Comment=rule_train_wildcards_a b\n")
    assert slurm_stop({}, scontrol(line)) is None  # not in a SLURM job
    assert slurm_stop({"SLURM_JOB_ID": "12"}, scontrol(line.replace("TIMEOUT", "RUNNING").replace("TimeLimit ", "None "))) is None
    assert slurm_stop({"SLURM_JOB_ID": "12"}, scontrol("", returncode=1)) is None  # scontrol does not know it
    assert slurm_stop({"SLURM_JOB_ID": "12"}, scontrol(line)).startswith("stopped by SLURM: job 12 TIMEOUT: its time limit (00:01:00")

    def missing(cmd, **kwargs):
        raise FileNotFoundError("scontrol")

    assert slurm_stop({"SLURM_JOB_ID": "12"}, missing) is None


def test_the_end_line_reads_slurms_reason_from_the_runs_log(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    log = log_path(RECORD)
    assert str(log) == f"results/logs/runs/mnist/pytorch/{RUN}.log"
    log.parent.mkdir(parents=True)
    why = "stopped by SLURM: job 12 CANCELLED: cancelled (scancel, by its user or an administrator) (EndTime=2026-12-06T11:40:00)"
    log.write_text("waiting...\nTraceback? no\n" + stop_line(RUN, why, "SIGTERM") + "\n")
    assert stopped_in_log(log) == why
    assert stop_lines([RECORD, "results/runs/mnist/pytorch/other.json"]) == [f"  not run: {RECORD}: {why}"]
    log.write_text(f"{RUN}: stopped by SIGINT; the training was killed, no record written\n")  # Ctrl-C: not SLURM's
    assert stopped_in_log(log) is None and stop_lines([RECORD]) == []


def test_a_job_ended_before_the_harness_said_why_is_read_from_its_slurm_log(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    jobs = tmp_path / ".snakemake/slurm_logs/rule_train" / f"mnist_pytorch_{RUN}"
    jobs.mkdir(parents=True)
    (jobs / "7.log").write_text("host: node1\nslurmstepd: error: *** JOB 7 ON node1 CANCELLED AT 2026-12-06T11:30:00 ***\n")
    assert stopped_in_slurm_log(RECORD, log_path(RECORD)).startswith(
        "stopped by SLURM: job 7 CANCELLED: slurmstepd on node1 at 2026-12-06T11:30:00")
    (jobs / "9.log").write_text(
        "slurmstepd: error: *** JOB 9 ON node2 CANCELLED AT 2026-12-06T11:35:00 DUE TO TIME LIMIT ***\n")
    later = time.time() + 5
    os.utime(jobs / "9.log", (later, later))
    assert stop_lines([RECORD])[0].startswith(f"  not run: {RECORD}: stopped by SLURM: job 9 TIMEOUT: slurmstepd on node2")
    # a later attempt's log (a run on this machine, Ctrl-C'd): the old job says nothing of it
    log = log_path(RECORD)
    log.parent.mkdir(parents=True)
    log.write_text("stopped by SIGINT\n")
    os.utime(log, (later + 60, later + 60))
    assert stop_lines([RECORD]) == []
