"""dlbench's console (`--logger dlbench`, profiles/default): a quiet terminal for a long benchmark.

A job of the rules in LABELS (the training runs, the environments, the data, the rounds) leaves one
line when it ends: Snakemake's count of steps done, what the job was and, for a run's record, its
status and throughput ("12:03:45 [131/209] run mnist pytorch ... repeat=2: ok, 7,725 samples/s,
41 s"). On a terminal, the bottom line says the job running now ("12:03:04 run mnist pytorch
model=small ... repeat=2 ... about 23 min left") until its end replaces it, the time left by the
invocation's estimate (dlbench.estimate, which the workflow writes before the first job); where the output is no terminal (a file, a
pipe) that line is left out. Other jobs say nothing while they go well. Their inputs, outputs and
shell commands stay in Snakemake's log file (.snakemake/log/) and the jobs' own logs
(results/logs/). Errors, warnings and every other message are Snakemake's own, as Snakemake formats
them; a dry run is Snakemake's own listing, unchanged.
"""
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field

from snakemake.logging import ColorizingTextHandler, get_event
from snakemake_interface_logger_plugins.base import LogHandlerBase
from snakemake_interface_logger_plugins.common import LogEvent
from snakemake_interface_logger_plugins.settings import LogHandlerSettingsBase

# What a job of these rules is, from its wildcards (a run id's key~value_key~value reads key=value)
LABELS = {
    "train": "run {run_set} {subject} {run}",
    "train_duet": "duet {run_set} {subject} {point} {variant} repeat={repeat}",
    "plan_repeats": "round {round}: which open points run another repeat",
    "build_venv": "build the {stack} environment",
    "largest_batch": "memory: the largest batch of {framework} in mode {mode}",
    "onnx_export": "export the {model} model through ONNX",
    "fetch_wheel": "fetch {wheel}",
    "fetch_file": "fetch {path}",
    "prepare_mnist": "prepare the MNIST digits",
    "duplicate_mnist": "MNIST's training set x{duplicate}",
    "prepare_imdb": "prepare the IMDB reviews",
    "chestxray_labels": "ChestX-ray14's labels",
    "chestxray_images": "ChestX-ray14's images",
    "preprocess_chestxray": "preprocess ChestX-ray14's images with {library} to {format}",
    "aggregate": "tables of {run_set}",
    "headline": "the headline ratios",
    "findings": "the findings: each claim against this run",
    "ab": "the A/B's verdicts",
    "compare": "compare with the baseline",
}
POINT_KEY = re.compile(r"(?:^|_)([a-z][a-z_]*)~")


def readable(value):
    """A run id's key~value_key~value as key=value key=value; any other value as it is."""
    return POINT_KEY.sub(lambda m: (" " if m.start() else "") + f"{m[1]}=", str(value))


def label(rule, wildcards):
    """What a job is, in a few words; None for a rule not in LABELS."""
    if rule not in LABELS:
        return None
    try:
        return LABELS[rule].format(**{k: readable(v) for k, v in (wildcards or {}).items()})
    except (KeyError, IndexError):
        return rule


# The invocation's estimate, {"seconds": total, "jobs": {first output: seconds}}: written by the workflow
# before its first job (dlbench.estimate.STATE, rules/lifecycle.smk), read here for the time left.
ESTIMATE = ".snakemake/dlbench-estimate.json"


def read_estimate(since):
    """{first output of a job: its estimated seconds} of the invocation that started at `since` (time.time());
    {} where there is none, or the file is an older invocation's."""
    try:
        if os.stat(ESTIMATE).st_mtime < since:
            return {}
        with open(ESTIMATE) as f:
            return {str(k): float(v) for k, v in json.load(f)["jobs"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def time_left(seconds):
    return f"about {seconds / 60:.0f} min left" if seconds >= 90 else f"about {seconds:.0f} s left"


# Snakemake's word before each choice of jobs: a line per job, said by the job's own lines here
SCHEDULING = "Select jobs to execute..."
# the events of a job that its line at the end (and on a terminal, its line while it runs) stand for
JOB_DETAIL = {LogEvent.JOB_INFO, LogEvent.JOB_STARTED, LogEvent.JOB_FINISHED, LogEvent.SHELLCMD, LogEvent.PROGRESS}


@dataclass
class LogHandlerSettings(LogHandlerSettingsBase):
    detail: bool = field(default=False, metadata={
        "help": "say every job as Snakemake does (its inputs, outputs and shell command) in the terminal too"})


def record_outcome(outputs):
    """': ok, 7,725 samples/s' from the run records among a job's outputs (results/runs/...json), or ''."""
    said = []
    for path in outputs:
        if not (path.startswith("results/runs/") and path.endswith(".json")):
            continue
        try:
            with open(path) as f:
                record = json.load(f)
        except (OSError, ValueError):
            said.append("no record written")
            continue
        status = str(record.get("status", "?")).replace("_", " ")
        rate = (record.get("summary") or {}).get("samples_per_s")
        error = (record.get("error") or "").splitlines()[:1]
        said.append(f"ok, {rate:,.0f} samples/s" if status == "ok" and rate and rate >= 100
                    else f"ok, {rate:.3g} samples/s" if status == "ok" and rate
                    else status + (f" ({error[0][:160]})" if error else ""))
    return ": " + "; ".join(said) if said else ""


class LogHandler(LogHandlerBase):
    def __post_init__(self):
        stream = sys.stdout if self.common_settings.stdout else sys.stderr
        # what passes through is said by Snakemake's own console handler, as without this plugin
        self.snakemake_own = ColorizingTextHandler(nocolor=self.common_settings.nocolor, stream=stream)
        self.stream = stream
        self.live = stream.isatty()  # a terminal: the running job on its bottom line
        self.detail = bool(self.settings and self.settings.detail)
        self.jobs = {}      # jobid -> (label, outputs, started, when it started)
        self.finished = []  # the lines of jobs that ended, said with the count Snakemake gives next
        self.showing = False  # the bottom line is the running job's
        self.started = time.time()
        self.estimate = None    # {first output: estimated seconds} of the jobs not yet done, read at the first job
        self.first_outputs = {}  # jobid -> its first output, of every job (the estimate's key)

    def clear(self):
        if self.showing:
            self.stream.write("\r\033[K")
            self.showing = False

    def show_running(self):
        """On a terminal, the job that started last and still runs, on the bottom line (no newline)."""
        if self.live and self.jobs:
            what, _, _, at = list(self.jobs.values())[-1]
            more = f" (and {len(self.jobs) - 1} more)" if len(self.jobs) > 1 else ""
            self.stream.write(f"{at} {what}{more} ...{self.left()}")
            self.showing = True
        self.stream.flush()

    def left(self):
        """' about N min left': the estimate of the jobs not done, less what the running ones have taken."""
        if self.estimate is None:
            self.estimate = read_estimate(self.started)
        if not self.estimate:
            return ""
        now = time.monotonic()
        running = {outputs[0]: now - started for _, outputs, started, _ in self.jobs.values() if outputs}
        left = sum(max(0.0, seconds - running.get(output, 0.0)) for output, seconds in self.estimate.items())
        return f" {time_left(left)}"

    def say(self, text):
        self.clear()
        self.stream.write(f"{time.strftime('%H:%M:%S')} {text}\n")
        self.show_running()

    def emit(self, record):
        event = get_event(record)
        if not self.common_settings.dryrun and not self.detail and event is None and record.getMessage() == SCHEDULING:
            return
        if event == LogEvent.JOB_INFO and record.output:
            self.first_outputs[record.jobid] = str(list(record.output)[0])
        if event == LogEvent.JOB_FINISHED and self.estimate:
            self.estimate.pop(self.first_outputs.get(record.job_id), None)
            if record.job_id not in self.jobs:  # a job said by no line of its own: the time left still moves
                self.clear()
                self.show_running()
        if event == LogEvent.JOB_ERROR:  # no longer running: Snakemake's own message says how it failed
            self.jobs.pop(getattr(record, "jobid", None), None)
        if self.common_settings.dryrun or self.detail or event not in JOB_DETAIL:
            self.snakemake_own.setFormatter(self.formatter)   # Snakemake's, set on this handler
            self.clear()
            self.snakemake_own.emit(record)
            self.show_running()
        elif event == LogEvent.JOB_INFO and (what := label(record.rule_name, record.wildcards)):
            self.jobs[record.jobid] = (what, list(record.output or []), time.monotonic(), time.strftime("%H:%M:%S"))
            self.clear()
            self.show_running()
        elif event == LogEvent.JOB_FINISHED and record.job_id in self.jobs:
            what, outputs, started, _ = self.jobs.pop(record.job_id)
            self.finished.append(f"{what}{record_outcome(outputs)}, {time.monotonic() - started:.0f} s")
            self.clear()
            self.show_running()
        elif event == LogEvent.PROGRESS:
            for line in self.finished:
                self.say(f"[{record.done}/{record.total}] {line}")
            self.finished = []
            if record.done == record.total:
                self.say(f"{record.done} of {record.total} steps done")

    def close(self):
        self.jobs.clear()
        for line in self.finished:
            self.say(line)
        self.clear()
        self.stream.flush()
        super().close()

    @property
    def writes_to_stream(self):
        return True

    @property
    def writes_to_file(self):
        return False

    @property
    def has_filter(self):
        return False   # Snakemake's own filter (--quiet, --printshellcmds, levels)

    @property
    def has_formatter(self):
        return False   # Snakemake's own formatter for everything this handler passes through

    @property
    def needs_rulegraph(self):
        return False
