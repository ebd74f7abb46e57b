"""MNIST as the workflow knows it (pure: no framework, no data): its specs, its grid, the
initial weights of its models, its figures and its config checks. dlbench.workloads says what
a definition holds."""
import itertools
from dataclasses import dataclass

from dlbench import flops
from dlbench.frameworks import without_recomputing
from dlbench.spec_types import Adam, Convergence, Run
from dlbench.sweep import RunSet, check_batch, check_modes, check_strategies, device_strategies, run_fields

DATA = "results/data/mnist"
TRAIN_IMAGES = 60_000  # the real training split; a duplicate point repeats it


@dataclass(frozen=True)
class MnistModel:
    name: str            # small (402,442 parameters) or large (4,104,202)


@dataclass(frozen=True)
class MnistData:
    train_images: str
    train_labels: str
    test_images: str
    test_labels: str
    train_limit: int | None   # the first N samples of a split; None, all
    test_limit: int | None


@dataclass(frozen=True)
class MnistSpec(Run):
    model: MnistModel
    duplicate: int
    optimizer: Adam
    data: MnistData

    def point(self):
        return {"model": self.model.name, "duplicate": self.duplicate, "batch": self.batch,
                "devices": self.devices, "nodes": self.nodes, "strategy": self.strategy, "mode": self.mode, "precision": self.precision}


COLUMNS = ("model", "duplicate", "batch", "devices", "nodes", "strategy", "mode", "precision", "repeat")


def runs(config, frameworks, repeats):
    """Rows {framework, model, duplicate, batch, devices, nodes, strategy, mode, precision, repeat} of the MNIST grid."""
    mnist = config["mnist"]
    rows = []
    for framework in frameworks:
        for model, copies, batch, devices, nodes in itertools.product(
            mnist["models"], mnist["duplicates"], mnist["batches"], mnist["devices"], mnist["nodes"]
        ):
            strategies = device_strategies(devices, nodes, mnist["strategies"], framework)
            for strategy, mode, precision, repeat in itertools.product(
                    strategies, mnist["modes"][framework], mnist["precisions"], range(1, repeats + 1)):
                rows.append({"framework": framework, "model": model, "duplicate": copies, "batch": batch,
                             "devices": devices, "nodes": nodes, "strategy": strategy, "mode": mode,
                             "precision": precision, "repeat": repeat})
    return rows


def spec(config, row, threads):
    mnist = config["mnist"]
    model, copies = row["model"], row["duplicate"]
    data = MnistData(train_images=f"{DATA}/train-duplicate~{copies}-images.npy",
                     train_labels=f"{DATA}/train-duplicate~{copies}-labels.npy",
                     test_images=f"{DATA}/test-images.npy", test_labels=f"{DATA}/test-labels.npy",
                     train_limit=mnist["train_images"].get(model), test_limit=mnist["test_images"].get(model))
    # The study's first and second epoch: convergence in epochs of this point's training set.
    epoch_steps = (data.train_limit or TRAIN_IMAGES * copies) // (row["batch"] * row.get("devices", 1))
    convergence = Convergence(steps=mnist["convergence_epochs"] * epoch_steps, eval_every=max(1, epoch_steps))
    return MnistSpec(**run_fields(config, mnist, "mnist", row, COLUMNS, threads, convergence, batch=row["batch"]),
                     model=MnistModel(model), duplicate=copies, optimizer=Adam(**mnist["optimizer"]), data=data)


# The models as PyTorch's nn.Sequential lists them (dlbench/workloads/mnist/pytorch.py): a
# state-dict name's number is the layer's index; layers without weights hold their place.
LAYERS = {
    "small": [("conv", 1, 32), "relu", "pool", "flatten", ("linear", 32 * 14 * 14, 64), "relu", ("linear", 64, 10)],
    "large": [("conv", 1, 128), "relu", "pool", ("conv", 128, 256), "relu", "pool", ("conv", 256, 512), "relu",
              "pool", "flatten", ("linear", 512 * 3 * 3, 512), "relu", ("linear", 512, 512), "relu",
              ("linear", 512, 10)],
}


def overhead_row(config):
    """The point benchmarks/overhead.py compares with the bare loops (benchmarks/bare/<workload>_<framework>.py)."""
    return {"model": "small", "duplicate": 1, "batch": config["mnist"]["batches"][0], "devices": 1,
            "nodes": 1, "strategy": "none"}


def train_flops(spec):
    """FLOPs of one training image (dlbench.flops): the 3x3 convolutions (padding 1) at the size
    each pooling leaves, and the linear layers; the images need no gradient."""
    layers, size = [], 28
    for layer in LAYERS[spec.model.name]:
        if layer == "pool":
            size //= 2
        elif isinstance(layer, tuple):
            kind, n_in, n_out = layer
            first = not layers
            layers.append(flops.conv2d(n_in, n_out, 3, size, size, input_gradient=not first) if kind == "conv"
                          else flops.linear(n_in, n_out, input_gradient=not first))
    return flops.training(layers)


def draw_weights(draw, model):
    """PyTorch's default initialisation of each layer (dlbench.weights.Draw)."""
    for index, layer in enumerate(LAYERS[model.name]):
        if isinstance(layer, tuple):
            kind, n_in, n_out = layer
            if kind == "conv":
                draw.conv(str(index), n_in, n_out, 3)
            else:
                draw.linear(str(index), n_in, n_out)


RUN_SETS = (RunSet("mnist", MnistSpec, COLUMNS, runs, spec, draw_weights, flops=train_flops, sample="images",
                   modes_not_applicable=without_recomputing("mnist")),)
FIGURES = ("throughput", "first-vs-second-epoch", "scale-up", "accuracy", "loss", "modes", "precision")
TABLES = ()          # besides the tables of every run set
TARGET = ("test_accuracy", "target_accuracy")   # the metric, and its target's key in the section
RENAMED = {"batch_sizes": "batches"}   # a run's `batch`, one word
# What the studies read of it (dlbench.workloads says what each is)
DATA_RULES = ("prepare_mnist", "duplicate_mnist")
CLAIM_TABLES = ("mnist-ratios", "mnist-convergence")
MEMORY_BATCHES = (64, 256)
EXPORTS = {"mnist-small": ({"model": "small"}, "argmax")}


def check(config):
    """What the schema cannot check: the strategies and modes of each framework, batches the
    training images fill."""
    check_strategies(config, "mnist")
    check_modes(config, "mnist")
    mnist = config["mnist"]
    for model in mnist["models"]:
        images = mnist["train_images"].get(model) or TRAIN_IMAGES * min(mnist["duplicates"])
        for batch in mnist["batches"]:
            check_batch("mnist.batches", batch, max(mnist["devices"]), images,
                        f"training images of model {model} (mnist.train_images)")
