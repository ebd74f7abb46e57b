"""The console (plugins/logger, profiles/default's `logger: dlbench`): a line per job when it ends,
with its status and throughput and Snakemake's count of steps, and on a terminal the running job on
the bottom line; no job's inputs or shell command in the terminal, all of them in Snakemake's log
file; the end says how the runs stand and where the report is. docs/console.md says what these tests
hold it to."""
import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import REPO, SMOKE_CONSOLE

sys.path.insert(0, str(REPO / "plugins" / "logger"))
from snakemake_logger_plugin_dlbench import LABELS, label, readable, record_outcome  # noqa: E402


def test_a_job_is_said_in_a_few_words_its_run_id_as_key_value():
    assert readable("model~small_duplicate~1_batch~256_max_len~100_repeat~2") == (
        "model=small duplicate=1 batch=256 max_len=100 repeat=2")
    assert label("train", {"run_set": "mnist", "subject": "pytorch", "run": "batch~64_variant~b_repeat~3"}) == (
        "run mnist pytorch batch=64 variant=b repeat=3")
    assert label("plot_mnist", {}) is None and "plan_repeats" in LABELS


def test_a_job_s_end_says_its_record_s_status_and_throughput(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runs = tmp_path / "results" / "runs" / "mnist" / "pytorch"
    runs.mkdir(parents=True)
    (runs / "a.json").write_text(json.dumps({"status": "ok", "summary": {"samples_per_s": 7725.4}}))
    (runs / "b.json").write_text(json.dumps({"status": "failed", "error": "training process failed (exit code -9; "
                                                                          "out of memory)\nTraceback"}))
    assert record_outcome(["results/runs/mnist/pytorch/a.json"]) == ": ok, 7,725 samples/s"
    (runs / "slow.json").write_text(json.dumps({"status": "ok", "summary": {"samples_per_s": 1.234}}))
    assert record_outcome(["results/runs/mnist/pytorch/slow.json"]) == ": ok, 1.23 samples/s"
    assert record_outcome(["results/runs/mnist/pytorch/b.json"]) == (
        ": failed (training process failed (exit code -9; out of memory))")
    assert record_outcome(["results/runs/mnist/pytorch/c.json"]) == ": no record written"
    assert record_outcome(["results/tables/mnist-runs.csv"]) == ""


@pytest.mark.slow
def test_the_smoke_run_s_console_is_a_line_per_job_and_the_detail_stays_in_the_log_file(smoke_run):
    said_at = (smoke_run / SMOKE_CONSOLE).stat().st_mtime
    console = (smoke_run / SMOKE_CONSOLE).read_text()
    lines = console.splitlines()
    # the smoke run's records (later tests add and change records of their own in this folder)
    records = sorted(p for p in smoke_run.glob("results/runs/*/*/*.json") if p.stat().st_mtime <= said_at)
    assert records
    # each training job: one line, when it ends, with its outcome and the count of steps
    for record in records:
        run_set, subject, run = record.parent.parent.name, record.parent.name, record.stem
        said = f"run {run_set} {subject} {readable(run)}"
        status = json.loads(record.read_text())["status"]
        ends = [line for line in lines if re.search(rf"\[\d+/\d+\] {re.escape(said)}: ", line)]
        assert len(ends) == 1 and (" ok, " in ends[0] if status == "ok" else status.replace("_", " ") in ends[0]), ends
    # no line of a job's start where the output is no terminal (here, a file)
    assert not [line for line in lines if re.match(r"\d\d:\d\d:\d\d (run|duet|build) ", line)]
    assert "Shell command:" not in console and "    input: " not in console
    # what the terminal leaves out is in Snakemake's log file
    [log] = re.findall(r"^Complete log\(s\): (\S+)$", console, re.M)   # the smoke run's, as its end names it
    detail = Path(log).read_text()
    assert "Shell command:" in detail and "dlbench.harness" in detail
    # short: a line a job, and a few dozen for the rest (Snakemake's header and job table)
    job_lines = [line for line in lines if re.match(r"\d\d:\d\d:\d\d \[\d+/\d+\] ", line)]
    assert len(lines) <= len(job_lines) + 150, len(lines)
    assert re.search(r"^dlbench runs: \d+ ok", console, re.M)
    # the time it took beside its estimate (README, Presets; docs/estimate.md), before the first job the plan
    assert re.search(r"^dlbench time: [\d.]+ min \((estimated [\d.]+ min|no estimate)\)$", console, re.M)
    assert re.search(r"^dlbench plan: \d+ runs to run \(", console, re.M)
    assert "dlbench report: snakemake --report results/report.html" in console


def handler(detail=False, dryrun=False):
    import logging

    from snakemake.logging import DefaultFormatter
    from snakemake_logger_plugin_dlbench import LogHandler, LogHandlerSettings

    settings = SimpleNamespace(dryrun=dryrun, stdout=False, nocolor=True, quiet=set(), printshellcmds=True,
                               show_failed_logs=True, verbose=False, debug_dag=False)
    made = LogHandler(settings, LogHandlerSettings(detail=detail))
    made.setFormatter(DefaultFormatter(set(), True))   # Snakemake sets its own (has_formatter is False)
    made.setLevel(logging.INFO)
    return made


def event(kind, msg="", **fields):
    import logging

    record = logging.LogRecord("snakemake", logging.INFO, __file__, 1, msg, None, None)
    record.__dict__.update(event=kind, **fields)
    return record


def job_info(jobid, rule, wildcards, output=()):
    from snakemake_interface_logger_plugins.common import LogEvent

    return event(LogEvent.JOB_INFO, f" Rule: {rule}, Jobid: {jobid}", jobid=jobid, rule_msg=None, rule_name=rule,
                 local=False, input=["a"] * 50, output=list(output), log=[], benchmark=None, wildcards=wildcards,
                 reason="Missing output files", resources={}, priority=1, threads=2, indent=False,
                 is_checkpoint=False, printshellcmd=True, is_handover=False, shellcmd="exec python -m dlbench.harness")


def test_the_console_says_a_job_once_at_its_end_and_the_rest_as_snakemake_does(capsys, tmp_path, monkeypatch):
    from snakemake_interface_logger_plugins.common import LogEvent

    monkeypatch.chdir(tmp_path)
    record = "results/runs/mnist/pytorch/batch~64_repeat~1.json"
    (tmp_path / record).parent.mkdir(parents=True)
    (tmp_path / record).write_text(json.dumps({"status": "ok", "summary": {"samples_per_s": 1234.0}}))
    console = handler()
    wildcards = {"run_set": "mnist", "subject": "pytorch", "run": "batch~64_repeat~1"}
    for made in (job_info(7, "train", wildcards, [record]), event(LogEvent.SHELLCMD, "exec python", cmd="exec python"),
                 job_info(8, "plot_mnist", {}), event(LogEvent.JOB_FINISHED, "Finished jobid: 8", job_id=8),
                 event(LogEvent.PROGRESS, "", done=2, total=9),
                 event(LogEvent.JOB_FINISHED, "Finished jobid: 7", job_id=7),
                 event(LogEvent.PROGRESS, "", done=3, total=9), event(None, "Select jobs to execute..."),
                 event(None, "a warning of Snakemake's")):
        console.handle(made)
    said = capsys.readouterr().err.splitlines()   # no terminal: nothing of the job until its end
    assert [line[9:] for line in said[:-1]] == ["[3/9] run mnist pytorch batch=64 repeat=1: ok, 1,234 samples/s, 0 s"]
    assert said[-1] == "a warning of Snakemake's"
    # --logger-dlbench-detail (and a dry run): Snakemake's own listing
    detailed = handler(detail=True)
    detailed.handle(job_info(7, "train", wildcards, [record]))
    assert "rule train:" in capsys.readouterr().err


def test_on_a_terminal_the_running_job_is_the_bottom_line_until_its_end_replaces_it(tmp_path, monkeypatch):
    """A real pseudo-terminal: what a user sees is the running job's line, and once it has ended, its
    one line with the outcome; another message while it runs goes above it."""
    import os
    import pty
    import select

    from snakemake_interface_logger_plugins.common import LogEvent

    monkeypatch.chdir(tmp_path)
    record = "results/runs/mnist/pytorch/batch~64_repeat~1.json"
    (tmp_path / record).parent.mkdir(parents=True)
    (tmp_path / record).write_text(json.dumps({"status": "ok", "summary": {"samples_per_s": 1234.0}}))
    leader, follower = pty.openpty()
    terminal = os.fdopen(follower, "w")
    monkeypatch.setattr(sys, "stderr", terminal)
    console = handler()
    wildcards = {"run_set": "mnist", "subject": "pytorch", "run": "batch~64_repeat~1"}

    def received():
        """Everything the terminal has been sent so far. The kernel hands a pseudo-terminal's output on
        asynchronously, so one read can return part of it: read until the terminal has closed (EIO) or
        half a second passes with nothing more."""
        chunks = []
        while select.select([leader], [], [], 0.5)[0]:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: every writer has closed and all was read
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks).decode()

    def screen():
        """The terminal's lines as a user sees them: a carriage return and erase-line take the line back."""
        text = received().replace("\r\n", "\n")
        lines = [""]
        for part in re.split(r"(\r\x1b\[K|\n)", text):
            if part == "\n":
                lines.append("")
            elif part == "\r\x1b[K":
                lines[-1] = ""
            else:
                lines[-1] += part
        return [line[9:] if re.match(r"\d\d:\d\d:\d\d ", line) else line for line in lines]

    console.handle(job_info(7, "train", wildcards, [record]))
    assert screen() == ["run mnist pytorch batch=64 repeat=1 ..."]
    console.handle(event(None, "a warning of Snakemake's"))
    console.handle(event(LogEvent.JOB_FINISHED, "Finished jobid: 7", job_id=7))
    console.handle(event(LogEvent.PROGRESS, "", done=3, total=9))
    console.close()
    terminal.close()
    warning, outcome, last = screen()
    assert (warning, last) == ("a warning of Snakemake's", "")
    assert re.fullmatch(r"\[3/9\] run mnist pytorch batch=64 repeat=1: ok, 1,234 samples/s, \d s", outcome)


def test_the_bottom_line_says_the_time_left_by_the_invocation_s_estimate(tmp_path, monkeypatch):
    """The estimate the workflow writes before its first job (dlbench.estimate.save): the running job's
    line says the time its jobs not done take by it, less what the running one has taken; a job that ends
    takes its share with it."""
    import io

    from snakemake_interface_logger_plugins.common import LogEvent
    from snakemake_logger_plugin_dlbench import ESTIMATE

    from dlbench import estimate as estimates

    monkeypatch.chdir(tmp_path)
    first, second = "results/runs/mnist/pytorch/batch~64_repeat~1.json", "results/figures/mnist/throughput.png"
    assert ESTIMATE == estimates.STATE
    found = estimates.Estimate(seconds=660.0, rounds=60.0, jobs={first: 540.0, second: 60.0})
    console = handler()
    console.live, console.stream = True, io.StringIO()   # a terminal's bottom line
    estimates.save(found)
    wildcards = {"run_set": "mnist", "subject": "pytorch", "run": "batch~64_repeat~1"}
    console.handle(job_info(8, "plot_mnist", {}, [second]))
    console.handle(job_info(7, "train", wildcards, [first]))
    assert console.stream.getvalue().endswith("run mnist pytorch batch=64 repeat=1 ... about 11 min left")
    console.handle(event(LogEvent.JOB_FINISHED, "Finished jobid: 8", job_id=8))
    assert console.stream.getvalue().endswith("run mnist pytorch batch=64 repeat=1 ... about 10 min left")
    # an estimate of another invocation (written before this one started) says nothing
    later = handler()
    later.started += 10
    later.live, later.stream = True, io.StringIO()
    later.handle(job_info(7, "train", wildcards, [first]))
    assert later.stream.getvalue().endswith("repeat=1 ...")
