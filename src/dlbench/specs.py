"""Typed run specs: everything one run uses, built once from the validated config.

A spec is a frozen dataclass per run set (dlbench.sweep.RunSet: a subclass of Run, in the
workload's definition.py). The workflow builds it and hands it
to the run as JSON (a plain `params:` value, so that Snakemake reruns a run whose spec
changed); the trainer reads it back with `spec_from_dict`, which fails on a missing or
unknown key and names it. The whole spec is stored in the run's record.

One name per meaning, in every workload: `model` is the model's hyperparameters, `data` the
paths of the prepared files a run reads, `batch` the per-device batch, `devices`, `nodes` and
`strategy` the data-parallel setup (1, 1 and "single" where a workload has no other), `mode`
the framework's execution mode (eager, compiled: see dlbench.frameworks).
"""
import dataclasses
import json
import types
import typing
from dataclasses import dataclass


class SpecError(ValueError):
    """A spec that cannot be built or read; the message names the key."""


@dataclass(frozen=True)
class Adam:
    lr: float
    beta1: float
    beta2: float
    eps: float


@dataclass(frozen=True)
class StepSchedule:
    """The learning rate times `factor` every `every_epochs` epochs of the run's order (IMDB, as the study)."""
    factor: float
    every_epochs: int


@dataclass(frozen=True)
class Measure:
    """How a run's throughput is measured (dlbench.clock.Plan): the same for every framework."""
    min_unit_seconds: float   # a unit lasts at least this long ...
    min_unit_steps: int       # ... and at least this many steps
    max_unit_steps: int       # calibration stops here even if a unit is still short
    warmup_tolerance: float   # warm-up ends when two consecutive units agree within this fraction ...
    max_warmup_units: int     # ... or after this many warm-up units of the calibrated length
    steady_units: int         # the measurement: units after the warm-up
    max_other_cpus: float     # a steady unit while other processes used more cores is contended ...
    max_contended_reruns: int  # ... and timed again in its place, up to this many times a run


@dataclass(frozen=True)
class Convergence:
    """Training from the shared start before the throughput units, evaluated every
    `eval_every` steps: loss and metric by step, steps to the target (0 steps: none)."""
    steps: int
    eval_every: int


@dataclass(frozen=True)
class CompileCache:
    """Where the framework keeps what it compiles (dlbench.protocol, step 1): a persistent cache
    shared by a point's repeats, so that a repeat after the first loads its programs instead of
    compiling them again; the first compiles cold, and its time is the point's compile figure."""
    directory: str | None  # the point's folder (relative to the workflow's); None: an empty one of this run's own
    fill: bool             # this run empties it first and compiles into it (cold); else it reads it (warm)


@dataclass(frozen=True)
class Run:
    """What every run has."""
    workload: str
    framework: str | None  # None: a run of no framework (the image libraries' benchmarks)
    run_id: str
    repeat: int
    seed: int
    device: str          # auto, cpu or gpu
    devices: int         # devices of the run (N CPU workers on a CPU), over all its nodes
    nodes: int           # machines the run spans (dlbench.nodes): devices // nodes on each
    strategy: str        # "single" on one device, else the framework's data-parallel engine
    mode: str | None     # the framework's execution mode (dlbench.frameworks); None where a run set has none
    batch: int           # per device; the global batch is batch x devices
    threads: int         # CPU threads of the whole run
    measure: Measure
    convergence: Convergence
    timeout_s: float
    numerics: str        # denormals: "flush" or "framework-default" (dlbench.numerics)
    gpu_float32: str     # float32 products on GPUs: "highest" or "tf32" (dlbench.numerics)
    compile_cache: CompileCache

    @property
    def global_batch(self):
        return self.batch * self.devices

    def point(self):
        """The sweep point {key: value}: the run id's fields but the repeat (a run is one
        repeat of its point). Each spec type says its own."""
        raise NotImplementedError


# --- reading and writing ---------------------------------------------------------------------------

def _convert(kind, value, where):
    """value (from JSON) as `kind`, a dataclass, a tuple, an optional or a plain type."""
    if dataclasses.is_dataclass(kind):
        return _from_dict(kind, value, where)
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (types.UnionType, typing.Union):
        if value is None and type(None) in args:
            return None
        (kind,) = [a for a in args if a is not type(None)]
        return _convert(kind, value, where)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise SpecError(f"{where}: expected a list, got {value!r}")
        return tuple(_convert(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise SpecError(f"{where}: expected {kind.__name__}, got {value!r}")
    return value


def _from_dict(cls, data, where):
    if not isinstance(data, dict):
        raise SpecError(f"{where}: expected a mapping, got {data!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    missing = sorted(set(fields) - set(data))
    if unknown:
        raise SpecError(f"{where}: unknown key(s) {', '.join(unknown)} for a {cls.__name__}")
    if missing:
        raise SpecError(f"{where}: missing key(s) {', '.join(missing)} for a {cls.__name__}")
    hints = typing.get_type_hints(cls)
    return cls(**{name: _convert(hints[name], data[name], f"{where}.{name}") for name in fields})


def spec_from_dict(data):
    """The typed spec of a dict (a record's spec, or JSON from the workflow)."""
    from dlbench.workloads import run_set, run_sets

    found = run_set(data.get("workload")) if isinstance(data, dict) else None
    if found is None:
        raise SpecError(f"spec: workload must be one of {', '.join(run_sets())}, got "
                        f"{data.get('workload') if isinstance(data, dict) else data!r}")
    return _from_dict(found.spec_type, data, "spec")


def spec_to_dict(spec):
    return dataclasses.asdict(spec)


def spec_to_json(spec):
    """Canonical JSON: the same spec is the same text, so Snakemake sees only real changes."""
    return json.dumps(spec_to_dict(spec), sort_keys=True, separators=(",", ":"))
