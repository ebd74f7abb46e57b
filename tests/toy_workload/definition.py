"""A toy workload: logistic regression on synthetic, nearly separable data (what the workflow
knows of it; dlbench.workloads says what a definition holds)."""
from dataclasses import dataclass

from dlbench.spec_types import Adam, Run
from dlbench.sweep import RunSet, convergence_steps, run_fields

DATA = "results/data/toy"


@dataclass(frozen=True)
class LinearModel:
    features: int
    classes: int


@dataclass(frozen=True)
class ToyData:
    train_x: str
    train_y: str
    test_x: str
    test_y: str


@dataclass(frozen=True)
class ToySpec(Run):
    model: LinearModel
    optimizer: Adam
    data: ToyData

    def point(self):
        return {"batch": self.batch}


COLUMNS = ("batch", "repeat")


def runs(config, frameworks, repeats):
    return [{"framework": framework, "batch": batch, "repeat": repeat}
            for framework in frameworks for batch in config["toy"]["batches"] for repeat in range(1, repeats + 1)]


def spec(config, row, threads):
    toy = config["toy"]
    return ToySpec(**run_fields(config, toy, "toy", row, COLUMNS, threads, convergence_steps(toy), batch=row["batch"]),
                   model=LinearModel(features=toy["features"], classes=2), optimizer=Adam(**toy["optimizer"]),
                   data=ToyData(*(f"{DATA}/{name}.npy" for name in ("train-x", "train-y", "test-x", "test-y"))))


def draw_weights(draw, model):
    draw.linear("linear", model.features, model.classes)


RUN_SETS = (RunSet("toy", ToySpec, COLUMNS, runs, spec, draw_weights),)
FIGURES = ("throughput",)
TABLES = ()
TARGET = ("test_accuracy", "target_accuracy")
# What the studies read of it (dlbench.workloads): its data preparation in "where the time went", its
# model in the memory pass; no claim, no export
DATA_RULES = ("prepare_toy",)
MEMORY_BATCHES = (16,)


def check(config):
    """Nothing the schema does not check."""
