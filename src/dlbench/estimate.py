"""What an invocation will cost on this machine, before it starts: each job to run, timed as the same
job took in the records of earlier runs on the same CPU model (and GPUs), in results/ or in the
results folders the config names (estimate_from). No Snakemake in it: the workflow hands it the jobs
(rules/lifecycle.smk).

A training run costs what its record says its process took (wall_s), split into start-up (the
record's startup), compilation (summary.compile_s) and the rest; a run with no record of its own
takes the median of its point's other repeats, or else of its run set and framework (said as
"by analogy"). A job of another rule costs what its benchmark file says (Snakemake's `benchmark:`),
else the median of the benchmarked jobs that are neither a build nor a fetch. The adaptive rounds, whose
runs are not known before the first round ends, cost what the earlier run's later repeats took, at
most measurement.budget_minutes."""
import json
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path


RUN_RULES = ("train", "train_duet")
HEAVY_RULES = ("build_venv", "fetch_wheel", "fetch_file")  # not the cost of a job of unknown time
STATE = ".snakemake/dlbench-estimate.json"   # the running invocation's estimate, for the console (plugins/logger)


@dataclass(frozen=True)
class Job:
    rule: str
    outputs: tuple
    benchmark: str | None = None


@dataclass
class History:
    """The earlier records and benchmark files of this machine's CPU (and GPUs), by path under results/."""
    folders: list
    machine: str
    runs: dict = field(default_factory=dict)        # "runs/<set>/<subject>/<id>.json" -> {wall, startup, compile}
    benchmarks: dict = field(default_factory=dict)  # "benchmarks/<rule>/<name>.tsv" -> seconds
    other_machines: set = field(default_factory=set)


def machine_key(cpu_model, gpus):
    return " + ".join([cpu_model or "unknown CPU", *sorted(gpus or [])])


def gpu_names(gpus):
    return [g.get("name", str(g)) if isinstance(g, dict) else str(g) for g in gpus or []]


def load_history(folders, machine):
    """The records (results/runs/) and benchmark files (results/benchmarks/) under each results folder,
    of runs made on `machine` (machine_key); a folder whose records are all of other machines gives none."""
    history = History(folders=[str(f) for f in folders], machine=machine)
    for folder in map(Path, folders):
        ours = 0
        for path in sorted((folder / "runs").rglob("*.json")):
            try:
                record = json.loads(path.read_text())
                environment = record["environment"]
                wall = float(record["wall_s"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
            key = machine_key(environment.get("cpu_model"), gpu_names(environment.get("gpus")))
            if key != machine:
                history.other_machines.add(key)
                continue
            ours += 1
            startup = sum((record.get("startup") or {}).values())
            compile_s = max(0.0, ((record.get("summary") or {}).get("compile_s") or 0.0))
            history.runs[path.relative_to(folder).as_posix()] = {"wall": wall, "startup": startup, "compile": compile_s}
        if not ours:
            continue
        for path in sorted((folder / "benchmarks").rglob("*.tsv")):
            try:
                header, row = path.read_text().splitlines()[:2]
                history.benchmarks[path.relative_to(folder).as_posix()] = float(
                    dict(zip(header.split("\t"), row.split("\t")))["s"])
            except (OSError, ValueError, KeyError):
                continue
    return history


def _point(key):
    """A record's path without its repeat: the point it is one repeat of."""
    head, _, tail = key.rpartition("_repeat~")
    return head if head else key


def _results_key(path):
    """results/runs/a/b.json -> runs/a/b.json (a path under a results folder)."""
    return path.split("results/", 1)[1] if path.startswith("results/") else path


@dataclass
class Estimate:
    seconds: float = 0.0
    startup: float = 0.0
    compile: float = 0.0
    rounds: float = 0.0
    runs: int = 0
    measured: int = 0     # runs timed by their own earlier record
    analogous: int = 0    # runs timed by their point's other repeats, or their run set's
    unknown: int = 0      # runs with nothing to go by
    others: int = 0
    jobs: dict = field(default_factory=dict)   # first output -> seconds, for the console's time left
    runs_per_set: dict = field(default_factory=dict)


def estimate(jobs, history, min_repeats, budget_minutes, rounds):
    """The estimate of `jobs` (Job) from `history`; `rounds`: whether adaptive rounds follow the first."""
    by_point, by_set = defaultdict(list), defaultdict(list)
    for key, run in history.runs.items():
        by_point[_point(key)].append(run)
        by_set[key.rsplit("/", 1)[0]].append(run)
    others = [s for key, s in history.benchmarks.items() if key.split("/")[1] not in HEAVY_RULES]
    other_s = statistics.median(others) if others else 0.0
    found = Estimate()
    for job in jobs:
        if job.rule in RUN_RULES:
            sides = []
            for path in (p for p in job.outputs if p.startswith("results/runs/")):
                key = _results_key(path)
                found.runs += 1
                found.runs_per_set[key.split("/")[1]] = found.runs_per_set.get(key.split("/")[1], 0) + 1
                if key in history.runs:
                    found.measured += 1
                    sides.append(history.runs[key])
                elif similar := by_point.get(_point(key)) or by_set.get(key.rsplit("/", 1)[0]):
                    found.analogous += 1
                    sides.append({k: statistics.median(r[k] for r in similar) for k in ("wall", "startup", "compile")})
                else:
                    found.unknown += 1
            if not sides:
                continue
            slowest = max(sides, key=lambda side: side["wall"])  # a duet's two sides run at once
            seconds = slowest["wall"]
            found.startup += slowest["startup"]
            found.compile += slowest["compile"]
        else:
            found.others += 1
            seconds = history.benchmarks.get(_results_key(job.benchmark or ""), other_s)
        found.seconds += seconds
        found.jobs[job.outputs[0] if job.outputs else job.rule] = seconds
    if rounds:
        later = [run["wall"] for key, run in history.runs.items()
                 if "_repeat~" in key and int(key.rsplit("_repeat~", 1)[1].split(".")[0]) > min_repeats]
        found.rounds = min(sum(later), 60.0 * budget_minutes)
        found.seconds += found.rounds
    return found


def minutes(seconds):
    return f"{seconds / 60:.0f} min" if seconds >= 600 else f"{seconds / 60:.1f} min"


def lines(found, history):
    """What the estimate says, in lines for the console: the runs per run set, then the time, or why none."""
    per_set = ", ".join(f"{n} {name}" for name, n in sorted(found.runs_per_set.items()))
    said = [f"dlbench plan: {found.runs} runs to run ({per_set or 'none'}), {found.others} other jobs"]
    where = ", ".join(history.folders)
    if found.runs and not (found.measured or found.analogous):
        others = f"; records of other machines: {', '.join(sorted(history.other_machines))}" if history.other_machines else ""
        said.append(f"dlbench estimate: none: no earlier record of this machine ({history.machine}) in {where}{others}. "
                    f"A run on this machine leaves them; then a dry run (snakemake -n) estimates from them, or name "
                    f"the results folder of an earlier run on this machine with --config 'estimate_from=[FOLDER]'")
        return said
    basis = [f"{found.measured} runs by their own earlier record"]
    if found.analogous:
        basis.append(f"{found.analogous} by their point's or run set's other runs")
    if found.unknown:
        basis.append(f"{found.unknown} with no record to go by, not counted")
    rounds = f", the adaptive rounds {minutes(found.rounds)}" if found.rounds else ""
    said.append(f"dlbench estimate: {minutes(found.seconds)} on this machine ({history.machine}): start-up "
                f"{minutes(found.startup)}, compilation {minutes(found.compile)}{rounds}; "
                f"{'; '.join(basis)}, from {where}")
    return said


def save(found, path=STATE):
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    # the rounds' runs are not known yet: their share stays in the time left until the invocation ends
    Path(path).write_text(json.dumps({"seconds": found.seconds, "jobs": {**found.jobs, "(adaptive rounds)": found.rounds}}))
