"""The machine's attainable peak, as each framework reaches it: a large matrix product timed like
every run, in each precision the run's workloads train in (float32, and bfloat16 or float16 where a
workload's `precisions` name them: `precisions`), the best framework's per measured precision the
machine's peak in that precision, against which the training runs' FLOP/s are model FLOP
utilisation, each against the peak of the precision it computed in (scripts/plot.py; what the
workflow knows of it; dlbench.workloads says what a definition holds)."""
from dataclasses import dataclass

from dlbench import precision
from dlbench.errors import ConfigError
from dlbench.frameworks import FRAMEWORKS
from dlbench.spec_types import Run
from dlbench.sweep import RunSet, run_fields


@dataclass(frozen=True)
class MatmulSpec(Run):
    size: int   # the product of two size x size matrices (float32, or the precision's 16-bit type): one step

    def point(self):
        return {"size": self.size, "precision": self.precision}


COLUMNS = ("size", "precision", "repeat")
AUTO = "auto"


def precisions(config):
    """The precisions the peak is measured in: matmul.precisions, or (auto, the default) every
    precision a configured workload trains in (its section's `precisions`), float32 always, in
    dlbench.precision.POLICIES' order. A 16-bit one the CPU has no arithmetic for is not applicable
    in every framework (dlbench.precision.hardware_reason), as the workloads' points of it."""
    asked = config["matmul"].get("precisions", AUTO)
    if asked != AUTO:
        return [p for p in precision.POLICIES if p in asked]
    used = {precision.DEFAULT}
    for name in config.get("workloads", []):
        used.update((config.get(name) or {}).get("precisions", ()))
    return [p for p in precision.POLICIES if p in used]


def runs(config, frameworks, repeats):
    """Rows {framework, size, precision, repeat}; not Keras' frameworks: their product is their backend's."""
    return [{"framework": framework, "size": size, "precision": policy, "repeat": repeat}
            for framework in frameworks if not FRAMEWORKS[framework].engine
            for size in config["matmul"]["sizes"] for policy in precisions(config)
            for repeat in range(1, repeats + 1)]


def spec(config, row, threads):
    return MatmulSpec(**run_fields(config, config["matmul"], "matmul", row, COLUMNS, threads, batch=1), size=row["size"])


def product_flops(spec):
    """A step's FLOPs, in any precision: size^2 dot products of size multiply-adds (the sum of the product that
    each step returns, size^2 more, is left out: 1 / (2 size) of it)."""
    return 2 * spec.size ** 3


RUN_SETS = (RunSet("matmul", MatmulSpec, COLUMNS, runs, spec, flops=product_flops, sample="products"),)
FIGURES = ("peak", "mfu")
TABLES = ("mfu",)
TARGET = None


def check(config):
    """matmul.precisions: auto or precisions that include float32 (every training run's MFU needs its peak)."""
    asked = config["matmul"].get("precisions", AUTO)
    if asked != AUTO and precision.DEFAULT not in asked:
        raise ConfigError(f"config matmul.precisions: {asked} leaves out float32, the peak of every float32 run "
                          f"(auto: the workloads' precisions)")
