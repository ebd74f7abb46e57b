"""What every workload's sweep shares (pure): a run set (a grid of runs and the spec of each),
the run id, the fields every spec has, the checks of a config section's sweep dimensions
(strategies, modes, batches) that a workload's check(config) uses. Each workload's own grid and
specs are in its folder (dlbench/workloads/<workload>/definition.py)."""
import dataclasses
import re
from dataclasses import dataclass
from typing import Callable

from dlbench import precision
from dlbench.errors import ConfigError
from dlbench.frameworks import FRAMEWORKS
from dlbench.spec_types import CompileCache, Convergence, Measure

SINGLE_DEVICE = "none"
MEASURE_KEYS = ("min_unit_seconds", "min_unit_steps", "max_unit_steps", "warmup_tolerance", "max_warmup_units",
                "steady_units", "max_other_cpus", "max_contended_reruns")


@dataclass(frozen=True)
class RunSet:
    """A set of runs of one workload with one kind of spec and one set of tables (e.g.
    ChestX-ray's training runs, or its framework loaders' benchmark)."""
    name: str            # spec.run_set; records in results/runs/<name>/, tables results/tables/<name>-*.csv;
                         # its task and framework modules in dlbench/workloads/<name>/, a-b in <a>/<b>/
    spec_type: type      # the frozen dataclass of its specs (a subclass of dlbench.spec_types.Run)
    columns: tuple       # a run id's fields, in order
    rows: Callable       # (config, frameworks, repeats) -> the grid's rows {framework, column: value}
    build: Callable      # (config, row, threads) -> the row's spec
    draw_weights: Callable | None = None   # (dlbench.weights.Draw, spec.model): the shared start; None: no model
    subject: str = "framework"   # what its runs compare (a row's key): records in results/runs/<name>/<its value>/
    environment: Callable | None = None    # spec -> the env a run runs in; None: the framework's, envs/<framework>.yaml
    flops: Callable | None = None          # spec -> FLOPs of one training sample (dlbench.flops); None: not counted
    runs_as: str | None = None   # the run set whose framework modules and initial weights its runs share (the
                                 # memory pass runs the training's); None: its own
    sample: str = "samples"      # what one sample of its throughput is (images, reviews): samples/s's unit
    timed: bool = True           # its throughput is a measurement (the headline has its ratios); the memory
                                 # pass's runs take a few steps, their time is not one
    modes_not_applicable: tuple = ()   # (framework, mode, why): modes its model gives no meaning, refused
                                       # before the framework starts (dlbench.frameworks.not_applicable_before_start)

    @property
    def runs_as_or_own(self):
        """The run set whose framework modules and initial weights its runs use: runs_as, or its own name."""
        return self.runs_as or self.name

    def env(self, spec):
        return spec.framework if self.environment is None else self.environment(spec)



def device_strategies(devices, nodes, strategies, framework):
    """One device runs without a data-parallel strategy; N devices once per strategy named; N
    devices on several nodes once per named strategy that spans nodes (the framework's
    multi_node ones), where the devices divide over the nodes."""
    if nodes > 1:
        if devices % nodes:
            return []
        return [s for s in strategies[framework] if s in FRAMEWORKS[framework].multi_node]
    return [SINGLE_DEVICE] if devices == 1 else strategies[framework]


def run_id(row, columns):
    """The sweep point readable in a name, in Snakemake Paramspace's key~value_key~value form,
    e.g. model~small_duplicate~1_batch~256_devices~2_nodes~1_strategy~ddp_mode~eager_repeat~1;
    a variant's (config variants) names it before the repeat: ..._mode~eager_variant~next_repeat~1,
    and a duet's side the duet: ..._variant~next_duet~next_repeat~1 (its framework's side
    ..._mode~eager_duet~next_repeat~1)."""
    point = [c for c in columns if c != "repeat"] + [c for c in ("variant", "duet") if row.get(c)]
    return "_".join(f"{column}~{row[column]}" for column in point + [c for c in columns if c == "repeat"])


def with_variants(rows, variants):
    """A grid's rows and, after each framework's, those of its variants (config variants: {name:
    {framework, ...}}): the same points, each row naming its variant. A duet variant's rows are
    pairs, its own and its framework's at the same point, both naming the duet."""
    found = []
    for framework in dict.fromkeys(row["framework"] for row in rows):
        own = [row for row in rows if row["framework"] == framework]
        found += own
        for name, variant in variants.items():
            if variant["framework"] != framework:
                continue
            if variant.get("schedule") == "duet":
                found += [side for row in own for side in ({**row, "duet": name}, {**row, "variant": name, "duet": name})]
            else:
                found += [{**row, "variant": name} for row in own]
    return found


DUET_SIDE = re.compile(r"_variant~(?P<name>[a-z0-9][a-z0-9.-]*)_duet~(?P=name)_")


def duet_sides(path):
    """(the framework's side, the variant's side) of the duet whose side's record `path` is, or None for
    a run of no duet: ..._duet~next_repeat~1.json and ..._variant~next_duet~next_repeat~1.json."""
    if match := DUET_SIDE.search(path):
        return path[:match.start()] + path[match.start() + len(f"_variant~{match['name']}"):], path
    if match := re.search(r"_duet~([a-z0-9][a-z0-9.-]*)_", path):
        return path, path[:match.start()] + f"_variant~{match[1]}" + path[match.start():]
    return None


def convergence_repeats(config, section):
    """The repeats (from repeat 1) that train the convergence segments: the section's own
    convergence_repeats where it has one (mnist's: the first and second epoch in 3 processes), else
    measurement.convergence_repeats."""
    return section.get("convergence_repeats") or config["measurement"]["convergence_repeats"]


def compile_cache(config, name, row, columns, section=None):
    """The run's compile cache: the point's folder, emptied and filled by each repeat that trains
    the convergence segments (repeat 1 by default: their first segment and compile time are the
    point's, cold), read by the later repeats; with measurement.compile_cache off, or for a run
    of no framework, an empty folder of each run's own."""
    if not config["measurement"]["compile_cache"] or row["framework"] is None:
        return CompileCache(directory=None, fill=True)
    point = run_id(row, [c for c in columns if c != "repeat"])
    return CompileCache(directory=f"results/cache/compile/{name}/{row['framework']}/{point}",
                        fill=row["repeat"] <= convergence_repeats(config, section or {}))


def run_fields(config, section, name, row, columns, threads, convergence=Convergence(0, 1), **fixed):
    """The fields every spec has (dlbench.spec_types.Run), from the config, the workload's section,
    a grid row and the job's threads. A row without a mode, of a run set that has modes, runs in
    the framework's default mode, and one without a precision, of a run set that has precisions, in
    float32. Only the first measurement.convergence_repeats repeats (the section's own
    convergence_repeats where set: `convergence_repeats`) train the convergence segments; a later
    repeat measures throughput only, from the same start. The same repeats compile cold into the
    point's compile cache (`compile_cache`), the later ones load from it."""
    if row["repeat"] > convergence_repeats(config, section):
        # convergence is a result of the point, not of each process: paid in the first repeats only
        convergence = Convergence(steps=0, eval_every=convergence.eval_every)
    if "mode" in columns and "mode" not in row:
        row = {**row, "mode": FRAMEWORKS[row["framework"]].default_mode}
    if "precision" in columns and "precision" not in row:
        row = {**row, "precision": precision.DEFAULT}
    fields = {"devices": 1, "nodes": 1, "strategy": SINGLE_DEVICE, "mode": None, "precision": None,
              **{k: row[k] for k in ("devices", "nodes", "strategy", "mode", "precision") if k in row}}
    fields.update(fixed)
    measure = Measure(**{k: config["measurement"][k] for k in MEASURE_KEYS})
    # a variant's settings in place of the config's (config variants; its env is the workflow's to choose)
    variant = config.get("variants", {}).get(row.get("variant")) or {}
    numerics = {**config["numerics"], **{k: variant[k] for k in ("denormals", "allocator") if variant.get(k)}}
    if row.get("duet"):
        # each side on half of the job's cores (dlbench.duet), the other half busy by design: a unit is
        # contended only when more than the other side's cores are used besides it
        threads = max(1, threads // 2)
        measure = dataclasses.replace(measure, max_other_cpus=measure.max_other_cpus + threads)
    return dict(compile_cache=compile_cache(config, name, row, columns, section),
                run_set=name, framework=row["framework"], run_id=run_id(row, columns), repeat=row["repeat"],
                seed=config["seed"], device_kind=config["device_kind"], threads=variant.get("threads") or threads,
                measure=measure, convergence=convergence, timeout_s=float(section["timeout_minutes"] * 60),
                numerics=numerics["denormals"], gpu_float32=numerics["gpu_float32"], allocator=numerics["allocator"],
                variant=row.get("variant"), duet=row.get("duet"),
                environment=tuple(f"{k}={v}" for k, v in sorted(variant.get("environment", {}).items())), **fields)


def convergence_steps(section):
    """Convergence in steps, evaluated every eval_every_steps (the section's keys)."""
    return Convergence(steps=section["convergence_steps"], eval_every=section["eval_every_steps"])


def check_strategies(config, section):
    """A section's strategies: known frameworks and strategies; filled for every framework (one
    left out takes all of its own; one given none runs on one device only)."""
    strategies = config[section]["strategies"]
    for framework, names in strategies.items():
        if framework not in FRAMEWORKS:
            raise ConfigError(f"config {section}.strategies: unknown framework {framework!r}")
        unknown = [name for name in names if name not in FRAMEWORKS[framework].strategies]
        if unknown:
            raise ConfigError(f"config {section}.strategies.{framework}: unknown strategy {unknown[0]!r} "
                              f"({framework} has {', '.join(FRAMEWORKS[framework].strategies)})")
    config[section]["strategies"] = {fw: list(strategies.get(fw, FRAMEWORKS[fw].strategies)) for fw in FRAMEWORKS}


def check_batch(key, batch, devices, samples, what):
    """A batch (per device, on `devices` devices) that the data it divides can fill."""
    if batch * devices > samples:
        on = f" on {devices} devices" if devices > 1 else ""
        raise ConfigError(f"config {key}: a batch of {batch}{on} is more than the {samples} {what}")


def check_modes(config, section):
    """A section's execution modes: known frameworks and modes; a framework left out runs in its
    default mode only (the first of its modes in src/dlbench/frameworks/__init__.py)."""
    modes = config[section]["modes"]
    for framework, names in modes.items():
        if framework not in FRAMEWORKS:
            raise ConfigError(f"config {section}.modes: unknown framework {framework!r}")
        known = [name for name, _ in FRAMEWORKS[framework].modes]
        unknown = [name for name in names if name not in known]
        if unknown:
            raise ConfigError(f"config {section}.modes.{framework}: unknown mode {unknown[0]!r} "
                              f"({framework} has {', '.join(known)})")
        if not names:
            raise ConfigError(f"config {section}.modes.{framework}: empty (name a mode, or leave the key out "
                              f"for {FRAMEWORKS[framework].default_mode})")
    config[section]["modes"] = {fw: list(modes.get(fw, [FRAMEWORKS[fw].default_mode])) for fw in FRAMEWORKS}
