"""The plan: every run, point, repeat, resource and target a validated config makes, on this many
cores, written once and with no Snakemake in it, so that a test can plan every preset.

The workflow's rules only ask it (rules/common.smk): the record of each run is an output, its spec a
params value, its priority, resources and environment come from here. The config's checks that the
schema cannot express run when a plan is made (dlbench.config.check_config), once.
"""
import math
import os
from dataclasses import dataclass
from pathlib import Path

from dlbench.config import check_config
from dlbench.definitions import definition, run_sets
from dlbench.errors import ConfigError
from dlbench.sweep import run_id, with_variants

# A plan of this many runs is a setting gone wrong (the default plans 310 and every preset less than
# 10,000, counting every repeat a round may ask for): stop, naming the settings that multiply it,
# before Snakemake fills the memory with jobs.
MAX_PLANNED_RUNS = 20_000
# The tables every run set's records make (rules/report.smk, rule aggregate)
TABLES = ("runs", "convergence", "units", "points", "ratios", "environment", "unsuccessful-runs", "utilisation")


def record_path(run_set, subject, point_id):
    return f"results/runs/{run_set}/{subject}/{point_id}.json"


def round_plan(round_):
    """The plan file of adaptive round `round_` (rules/runs.smk, checkpoint plan_repeats)."""
    return f"results/repeats/round-{round_}.json"


@dataclass(frozen=True)
class Run:
    """One planned run: one process (or one group of data-parallel processes) at one point and repeat."""
    path: str        # its record, results/runs/<run set>/<subject>/<run id>.json
    run_set: str
    subject: str     # its record's folder: the framework, or the library of a run of no framework
    spec: object     # its typed spec (dlbench.spec_types), a params value of its job
    env: str         # the software stack it runs in: its variant's env, its framework's, or its library's
    turn: str        # what it is one repeat of, in the run set's turns: its variant, or its subject
    priority: int    # every repeat 1 before any repeat 2, the subjects' order turning each repeat


class Plan:
    """What a config asks for, on `cores` cores (a training job takes them all): built once per
    invocation. `envs` is the folder of env files; `use_conda` says whether Snakemake builds the envs."""

    def __init__(self, config, cores, envs, use_conda=False):
        check_config(config, envs=envs, use_conda=use_conda)
        self.config = config
        self.frameworks = config["frameworks"]
        self.workloads = config["workloads"]
        self.studies = config["studies"]
        self.variants = config["variants"]
        # bring your own environment: {stack: interpreter} that runs a stack's jobs instead of one built
        # from its env file, as given (a relative path stays relative: a moved clone plans nothing again)
        self.interpreters = {stack: os.path.expanduser(path) for stack, path in config["interpreters"].items()}
        measurement = self.measurement = config["measurement"]
        # Each training job takes every core and the `training` resource, and the harness a lock per
        # machine: two never run side by side. With measurement.runs_at_once above 1 (the smoke preset's
        # tests of code paths, which measure nothing) they share the cores, unlocked.
        self.runs_at_once = measurement["runs_at_once"]
        self.threads = max(1, cores // self.runs_at_once)
        self.training = 1 if self.runs_at_once == 1 else 0
        self.lock = ["--lock", "results/locks/training"] if self.runs_at_once == 1 else []
        # `repeats` of every timed point, then rounds of one more repeat for the points whose question is
        # still open, up to max_repeats (dlbench.rounds); off without a budget
        self.min_repeats = measurement["repeats"]
        self.max_repeats = max(measurement["max_repeats"], self.min_repeats)
        self.rounds = self.max_repeats > self.min_repeats and measurement["budget_minutes"] > 0
        self.duets = [name for name, variant in self.variants.items() if variant["schedule"] == "duet"]
        for name, variant in self.variants.items():
            if variant["schedule"] == "duet" and self.threads < 2:
                raise ConfigError(f"config variants.{name}.schedule: a duet runs its two sides on half of the job's "
                                  f"cores each; this invocation gives a job {self.threads} (--cores, "
                                  f"measurement.runs_at_once)")
        # {name: (workload or study, RunSet)} of the configured workloads and studies
        self.run_sets = run_sets([*self.workloads, *self.studies])
        self.timed_sets = [name for name, (_, run_set) in self.run_sets.items() if run_set.timed]
        rows = self._rows()
        self._check_size(rows)
        self.runs = self._runs(rows)   # {record path: Run}

    def _rows(self):
        """{run set: its grid's rows}, every repeat a round may ask for, a variant's beside its framework's."""
        rows = {}
        for name, (owner, run_set) in self.run_sets.items():
            found = run_set.rows(self.config, self.frameworks, self.max_repeats if run_set.timed else self.min_repeats)
            rows[name] = with_variants(found, self.variants) if owner in self.workloads and run_set.timed else found
        return rows

    def _check_size(self, rows):
        planned = sum(map(len, rows.values()))
        if planned > MAX_PLANNED_RUNS:
            largest = max(rows, key=lambda name: len(rows[name]))
            raise ConfigError(
                f"config: {planned:,} runs planned, more than {MAX_PLANNED_RUNS:,} (the most: {largest}, "
                f"{len(rows[largest]):,}): each point runs measurement.max_repeats {self.max_repeats} times at most; "
                f"fewer repeats, or fewer values in the lists of {self.run_sets[largest][0]} (or a preset per study: "
                f"the README's Presets)")

    def _runs(self, rows):
        runs = {}
        for name, (_, run_set) in self.run_sets.items():
            specs = {record_path(name, row[run_set.subject], run_id(row, run_set.columns)): (row, run_set.build(
                self.config, row, self.threads)) for row in rows[name]}
            turns = list(dict.fromkeys(spec.variant or getattr(spec, run_set.subject) for _, spec in specs.values()))
            for path, (row, spec) in specs.items():
                turn = spec.variant or getattr(spec, run_set.subject)
                env = (self.variants[spec.variant]["env"] if spec.variant else None) or run_set.env(spec)
                # within a repeat the order of the subjects turns by one each repeat, so that drift of the
                # machine does not land on one of them
                priority = (self.max_repeats - spec.repeat + 1) * len(turns) - (turns.index(turn) - spec.repeat) % len(turns)
                runs[path] = Run(path, name, row[run_set.subject], spec, env, turn, priority)
        return runs

    # ---- what a rule asks -----------------------------------------------------------------

    def run(self, run_set, subject, run):
        return self.runs[record_path(run_set, subject, run)]

    def folders(self):
        """Every run set's record folders (frameworks, libraries): the wildcard `subject`."""
        return sorted({r.subject for r in self.runs.values()})

    def gpus(self, run):
        spec = run.spec
        return spec.devices // spec.nodes if self.config["device_kind"] == "gpu" and spec.framework else 0

    def memory_mb(self, run):
        cluster = self.config["cluster"]
        return cluster["memory_mb_by_workload"].get(self.run_sets[run.run_set][0], cluster["memory_mb"])

    def minutes(self, run):
        """A scheduler's time limit: the run's timeout plus a margin."""
        return math.ceil(run.spec.timeout_s / 60 + self.config["cluster"]["runtime_margin_minutes"])

    def accuracy_target(self, run_set):
        """The aggregate's --target of a run set: its workload's accuracy target, if it has one."""
        owner = self.run_sets[run_set][0]
        target = definition(owner).TARGET
        return ["--target", target[0], self.config[owner][target[1]]] if target else []

    # ---- targets --------------------------------------------------------------------------

    def first_records(self, run_set):
        """The records of a run set's first round: its repeats up to `repeats` (all of an untimed set's)."""
        return [r.path for r in self.runs.values() if r.run_set == run_set and r.spec.repeat <= self.min_repeats]

    def timed_records(self, rounds=()):
        """Every timed run's record planned so far: the first round's, then those of each adaptive round
        read (rounds: the record lists of the round plans written so far)."""
        first = [path for name in self.timed_sets for path in self.first_records(name)]
        return first + [path for records in rounds for path in records]

    def set_records(self, run_set, rounds=()):
        """The records of a run set: its first round and the adaptive rounds' (a timed set's)."""
        if run_set not in self.timed_sets:
            return self.first_records(run_set)
        return [path for path in self.timed_records(rounds) if path.startswith(f"results/runs/{run_set}/")]

    def report_targets(self):
        targets = [f"results/tables/{name}-{table}.csv" for name in self.run_sets for table in TABLES]
        for name in [*self.workloads, *self.studies]:
            targets += [f"results/figures/{name}/{figure}.png" for figure in definition(name).FIGURES]
            targets += [f"results/tables/{name}-{table}.csv" for table in definition(name).TABLES]
        return targets + ["results/tables/headline-ratios.csv"] + (["results/tables/ab.csv"] if self.variants else [])

    def targets(self):
        """What `snakemake` makes: the first round's records (the later rounds' come with the tables that
        read them) and the report's tables and figures."""
        return [path for name in self.run_sets for path in self.first_records(name)] + self.report_targets()

    def counts(self):
        """{run set: (first-round runs, most runs with every adaptive round)}."""
        return {name: (len(self.first_records(name)), sum(1 for r in self.runs.values() if r.run_set == name))
                for name in self.run_sets}


def spec_data(spec):
    """The prepared files a spec reads (its data's paths under results/): inputs of its job."""
    data = vars(spec.data) if hasattr(spec, "data") else {}
    return [value for value in data.values() if isinstance(value, str) and value.startswith("results/")]


def baseline_tables(baseline):
    """The units tables of a baseline results folder (config compare.baseline), or ConfigError."""
    if not baseline:
        raise ConfigError("config compare.baseline is not set: `snakemake compare` needs the results folder to compare "
                          "with, e.g. snakemake compare --config 'compare={baseline: ../before/results}'")
    tables = sorted(str(path) for path in Path(baseline, "tables").glob("*-units.csv"))
    if not tables:
        raise ConfigError(f"config compare.baseline: {baseline} has no units tables (tables/*-units.csv)")
    return tables
