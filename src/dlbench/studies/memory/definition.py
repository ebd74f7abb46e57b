"""The memory pass, apart from the timing runs (as TorchBench measures memory): each training
workload's models in every framework and mode, at the batches of memory.batches, trained for a
few steps in a process of its own, its peak memory read from the kernel (the training
process's ru_maxrss, its high-water mark: exact, not sampled) and the process tree's sampled
PSS; and, for the big model one workload declares (ChestX-ray: DenseNet-121), the largest batch
that fits memory.largest_batch.limit_mb in each framework and mode (rules.smk: a search, each
batch tried in a run of its own). What the workflow knows of it; dlbench.workloads says what a
definition holds, dlbench.studies what a study is.

The workloads it measures are those that declare MEMORY_BATCHES (their batches by default), each
model they train (`dlbench.declarations.models`: every run set of theirs that trains a framework's model from shared
initial weights, IMDB's LSTM and its Transformer); the search grows the model of the one that
declares LARGEST_BATCH_MODEL. It names no workload.

A memory run is its model's training run (the same spec type, modules, initial weights and data;
the run set <training run set>-memory runs as <training run set>: imdb-memory as imdb,
imdb-transformer-memory as imdb-transformer) with the memory pass's batch and steps:
its units are memory.steps steps each (one calibration, one warm-up, one steady unit) after the
run's first step alone (dlbench.clock.Plan), their time is not a measurement (RunSet.timed).

Each point of the frameworks of memory.repeated_frameworks runs memory.repeats processes (the
default: MXNet's and TensorFlow's, 3): a peak is one number per process, and a claim of less memory
rests on the interval over processes (scripts/plot.py's ratios), not on one; the other frameworks'
points run once, one sample (in a default run of a0268e3 on a 2-core AMD EPYC the pass took 273 s a
repeat, 159 of them DenseNet-45's, JAX's 69: 3 processes of every point would add 9.1 minutes, of
the two frameworks the claims compare 1.7: docs/default-run.md). The pass measures peaks apart from the timed runs because a timed run's peak is not one
measurement across its repeats: repeat 1 trains the convergence segments, evaluates and compiles
cold, the later ones load its compiled programs (JAX, XLA, torch.compile; not MXNet's or Chainer's),
and in a default run of a0268e3 repeat 1 peaked 8-35% above repeat 2 of the same point (MNIST
MXNet hybrid 607 against 454 MiB, IMDB Keras on TensorFlow 898 against 684). Here every process
does the same: the same steps, cold, no evaluation."""
import dataclasses

from dlbench.declarations import declared, models
from dlbench.errors import ConfigError
from dlbench.spec_types import CompileCache, Convergence, Measure
from dlbench.sweep import RunSet, run_id


# the training workloads it can measure (those that declare their batches), and the training run sets
# of each (the first: the workload's own)
BATCHES = declared("MEMORY_BATCHES")
TRAINING = {workload: models(workload) for workload in BATCHES}
MEASURED = tuple(TRAINING)
# {training run set name: (its workload, the RunSet)}
TRAINED = {run_set.name: (workload, run_set) for workload, sets in TRAINING.items() for run_set in sets}
# {workload: its big model, of memory.largest_batch.blocks}: the model the largest-batch search grows
LARGEST_BATCH_MODELS = declared("LARGEST_BATCH_MODEL")
if len(LARGEST_BATCH_MODELS) > 1:
    raise ValueError(f"LARGEST_BATCH_MODEL declared by {', '.join(LARGEST_BATCH_MODELS)}: the search's files name "
                     "no workload, so one workload at most declares it")


def measured(config):
    """The training workloads the memory pass measures: memory.workloads, or the configured ones of MEASURED."""
    chosen = config["memory"]["workloads"]
    return chosen if chosen is not None else [w for w in MEASURED if w in config["workloads"]]


def memory_sets(config):
    """The memory run sets of the measured workloads: <training run set>-memory of each model they train
    (one whose model the config trains no run of has no rows: imdb-transformer-memory without
    imdb.models' transformer)."""
    return [f"{run_set.name}-memory" for workload in measured(config) for run_set in TRAINING[workload]]


def batches(config, workload):
    """The batches the memory pass measures a workload at: memory.batches.<workload>, or its MEMORY_BATCHES."""
    return list(config["memory"]["batches"].get(workload) or BATCHES[workload])


def searched(config):
    """The measured workload whose big model the largest-batch search grows, or None."""
    return next((workload for workload in measured(config) if workload in LARGEST_BATCH_MODELS), None)


def training(workload):
    """The training run set of a workload's own model (its first)."""
    return TRAINING[workload][0]


def columns(name):
    """A memory run's id fields: those of training run set `name`, batch and repeat last."""
    return (*(c for c in TRAINED[name][1].columns if c not in ("batch", "repeat")), "batch", "repeat")


def first_points(config, trained_set, frameworks):
    """Each framework's and mode's first single-device row of a training run set's grid (repeat 1)."""
    found = {}
    for row in trained_set.rows(config, frameworks, 1):
        if row.get("devices", 1) == 1 and row.get("nodes", 1) == 1:
            found.setdefault((row["framework"], row.get("mode")), row)
    return list(found.values())


def repeats(config, framework):
    """A point's processes: memory.repeats for the frameworks of memory.repeated_frameworks (null:
    every framework), one for the others."""
    memory = config["memory"]
    chosen = memory.get("repeated_frameworks")
    return memory["repeats"] if chosen is None or framework in chosen else 1


def memory_rows(name):
    workload, trained_set = TRAINED[name]

    def rows(config, frameworks, _):
        if workload not in measured(config):
            return []
        return [{**row, "batch": batch, "repeat": repeat}
                for row in first_points(config, trained_set, frameworks)
                for batch in batches(config, workload)
                for repeat in range(1, repeats(config, row["framework"]) + 1)]
    return rows


def memory_measure(steps):
    """Units of `steps` steps after the first step alone: calibration (no minimum time), one warm-up, one
    steady, never timed again (the pass measures memory, not time)."""
    return Measure(min_unit_seconds=0.0, min_unit_steps=steps, max_unit_steps=steps, warmup_tolerance=1.0,
                   max_warmup_units=1, steady_units=1, max_other_cpus=0.0, max_contended_reruns=0)


def as_memory_run(spec, name, row, config, batch):
    """A training spec as a memory run of run set `name`: its batch, the memory pass's steps and
    timeout, no convergence segments, and a compile cache of its own, empty (every repeat compiles
    cold, the same measurement in each process, and none empties or fills the timed point's cache)."""
    memory = config["memory"]
    return dataclasses.replace(spec, run_set=name, run_id=run_id(row, columns(name.removesuffix("-memory"))),
                               repeat=row["repeat"], batch=batch, measure=memory_measure(memory["steps"]),
                               convergence=Convergence(steps=0, eval_every=1),
                               compile_cache=CompileCache(directory=None, fill=True),
                               timeout_s=float(memory["timeout_minutes"] * 60))


def memory_spec(name):
    def build(config, row, threads):
        base = TRAINED[name][1].build(config, {**row, "repeat": 1}, threads)
        return as_memory_run(base, f"{name}-memory", row, config, row["batch"])
    return build


def memory_run_set(name):
    """The memory run set of training run set `name`: its spec type and initial weights, run as it."""
    trained_set = TRAINED[name][1]
    return RunSet(f"{name}-memory", trained_set.spec_type, columns(name), memory_rows(name), memory_spec(name),
                  trained_set.draw_weights, runs_as=name, timed=False, sample=trained_set.sample)


def search_template(config, framework, mode, threads):
    """The spec the largest-batch search varies (batch 1): the framework's and mode's point of the
    searched workload with its big model of memory.largest_batch.blocks (ChestX-ray's DenseNet-121);
    None where the framework has no such point."""
    workload = searched(config)
    own = training(workload)
    rows = [row for row in first_points(config, own, [framework]) if row.get("mode") == mode]
    if not rows:
        return None
    spec = memory_spec(own.name)(config, {**rows[0], "batch": 1}, threads)
    # the search names each batch it tries: mode~<mode>_batch~<batch>
    return dataclasses.replace(spec, model=LARGEST_BATCH_MODELS[workload](config["memory"]["largest_batch"]["blocks"]),
                               run_id=run_id({"mode": mode}, ("mode",)))


def searches(config, frameworks):
    """(framework, mode) of every largest-batch search: each of its frameworks' modes of the searched workload."""
    workload = searched(config)
    if workload is None:
        return []
    chosen = config["memory"]["largest_batch"]["frameworks"]
    return [(framework, mode) for framework in frameworks if chosen is None or framework in chosen
            for mode in config[workload]["modes"][framework]]


RUN_SETS = tuple(memory_run_set(name) for name in TRAINED)
FIGURES = ("peak-memory", "largest-batch")
TABLES = ("peaks", "ratios", "largest-batch", "saving")
TARGET = None
CLAIM_TABLES = ("memory-peaks", "memory-ratios")


def check(config):
    """Every measured workload is a configured one that declares its batches (MEMORY_BATCHES)."""
    memory = config["memory"]
    for workload in measured(config):
        if workload not in MEASURED:
            raise ConfigError(f"config memory.workloads: {workload} declares no MEMORY_BATCHES: the memory pass "
                              f"measures {', '.join(MEASURED)}")
        if workload not in config["workloads"]:
            raise ConfigError(f"config memory.workloads: {workload} is not in workloads {config['workloads']}: "
                              "its data and model would not be prepared")
    for workload in memory["batches"]:
        if workload not in MEASURED:
            raise ConfigError(f"config memory.batches.{workload}: {workload} declares no MEMORY_BATCHES: the memory "
                              f"pass measures {', '.join(MEASURED)}")
    for framework in memory["largest_batch"]["frameworks"] or []:
        if framework not in config["frameworks"]:
            raise ConfigError(f"config memory.largest_batch.frameworks: {framework} is not in frameworks "
                              f"{config['frameworks']}")
