"""The types run specs are made of: Run, the fields every spec has, and the parts that several
specs share (an optimizer's, a learning-rate schedule's, the measurement's, the convergence
segments', the compile cache's). Each run set's own spec type, a subclass of Run, is in its
workload's definition.py; dlbench.specs reads and writes them.

One name per meaning, in every workload: `model` is the model's hyperparameters, `data` the
paths of the prepared files a run reads, `batch` the per-device batch, `devices`, `nodes` and
`strategy` the data-parallel setup (1, 1 and "none" where a workload has no other), `mode`
the framework's execution mode (eager, compiled: see dlbench.frameworks), `precision` the
numeric precision the model trains in (dlbench.precision).
"""
from dataclasses import dataclass


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
    run_set: str         # the run set's name (dlbench.sweep.RunSet.name): records in results/runs/<run_set>/
    framework: str | None  # None: a run of no framework (the image libraries' benchmarks)
    run_id: str
    repeat: int
    seed: int
    device_kind: str     # auto, cpu or gpu: the kind asked for
    devices: int         # devices of the run (N CPU workers on a CPU), over all its nodes
    nodes: int           # machines the run spans (dlbench.nodes): devices // nodes on each
    strategy: str        # "none" on one device (no data-parallel engine), else the framework's data-parallel engine
    mode: str | None     # the framework's execution mode (dlbench.frameworks); None where a run set has none
    precision: str | None  # float32, mixed-bfloat16 or mixed-float16 (dlbench.precision); None where a run set has none
    batch: int           # per device; the global batch is batch x devices
    threads: int         # CPU threads of the whole run
    measure: Measure
    convergence: Convergence
    timeout_s: float
    numerics: str        # denormals: "flush" or "framework-default" (dlbench.numerics)
    gpu_float32: str     # float32 products on GPUs: "highest" or "tf32" (dlbench.numerics)
    compile_cache: CompileCache
    allocator: str       # the heap allocator's policy: "fixed" or "framework-default" (dlbench.allocator)
    variant: str | None  # the A/B variant of the framework this run is (config variants); None: the framework itself
    environment: tuple[str, ...]  # NAME=value: the variant's environment variables of the training process
    duet: str | None     # the duet variant (config variants, schedule: duet) whose pair this run is a side of: it ran
                         # at the same time as the other side, on half of the job's cores; None: on its own

    @property
    def global_batch(self):
        return self.batch * self.devices

    def point(self):
        """The sweep point {key: value}: the run id's fields but the repeat (a run is one
        repeat of its point). Each spec type says its own."""
        raise NotImplementedError

    def sweep_point(self):
        """The point as records and tables hold it: point(), the variant where the run is one, and the
        duet where it is a side of one."""
        return {**self.point(), **({"variant": self.variant} if self.variant else {}),
                **({"duet": self.duet} if self.duet else {})}
