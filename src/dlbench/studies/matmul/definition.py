"""The machine's attainable peak, as each framework reaches it: a large float32 matrix product
timed like every run (the best framework's is the machine's peak), against which the training
runs' FLOP/s are model FLOP utilisation (what the workflow knows of it; dlbench.workloads says
what a definition holds)."""
from dataclasses import dataclass

from dlbench.frameworks import FRAMEWORKS
from dlbench.spec_types import Run
from dlbench.sweep import RunSet, run_fields


@dataclass(frozen=True)
class MatmulSpec(Run):
    size: int   # the product of two size x size float32 matrices: one step

    def point(self):
        return {"size": self.size}


COLUMNS = ("size", "repeat")


def runs(config, frameworks, repeats):
    """Rows {framework, size, repeat}; not Keras' frameworks: their product is their backend's."""
    return [{"framework": framework, "size": size, "repeat": repeat}
            for framework in frameworks if not FRAMEWORKS[framework].engine
            for size in config["matmul"]["sizes"] for repeat in range(1, repeats + 1)]


def spec(config, row, threads):
    return MatmulSpec(**run_fields(config, config["matmul"], "matmul", row, COLUMNS, threads, batch=1), size=row["size"])


def product_flops(spec):
    """A step's FLOPs: size^2 dot products of size multiply-adds (the sum of the product that
    each step returns, size^2 more, is left out: 1 / (2 size) of it)."""
    return 2 * spec.size ** 3


RUN_SETS = (RunSet("matmul", MatmulSpec, COLUMNS, runs, spec, flops=product_flops, sample="products"),)
FIGURES = ("peak", "mfu")
TABLES = ("mfu",)
TARGET = None


def check(config):
    """Nothing the schema does not check."""
