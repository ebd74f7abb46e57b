"""IMDB as the workflow knows it (pure: no framework, no data): its specs, its grids, the
initial weights of its two models (the study's LSTM; a Transformer encoder, run set
imdb-transformer, its framework modules in imdb/transformer/), its figures and its config checks.
dlbench.workloads says what a definition holds."""
import itertools
import math
from dataclasses import dataclass

from dlbench import flops
from dlbench.frameworks import NOT_APPLICABLE, without_recomputing
from dlbench.errors import ConfigError
from dlbench.spec_types import Adam, Run, StepSchedule
from dlbench.sweep import RunSet, check_batch, check_modes, convergence_steps, run_fields

TRAIN_REVIEWS = 12_500  # the real training split (imdb.train_reviews null: all of it)

DATA = "results/data/imdb"
ARRAYS = {f"{split}_{kind}": f"{DATA}/{split}-{kind}.npy" for split in ("train", "test") for kind in ("sequences", "labels")}


@dataclass(frozen=True)
class LstmModel:
    vocabulary: int
    embedding: int
    hidden: int
    maxlen: int
    classes: int


@dataclass(frozen=True)
class TransformerModel:
    """A pre-norm Transformer encoder classifier: token and learned position embeddings (width),
    `layers` of [LayerNorm -> multi-head self-attention masking the padding -> residual, LayerNorm
    -> Linear(feedforward) -> ReLU -> Linear(width) -> residual], a final LayerNorm, the mean over
    the real (non-padding) tokens, a Linear to the classes. Dropout none, LayerNorm eps 1e-5."""
    vocabulary: int
    width: int
    heads: int
    layers: int
    feedforward: int
    maxlen: int
    classes: int


@dataclass(frozen=True)
class ImdbData:
    train_sequences: str
    train_labels: str
    test_sequences: str
    test_labels: str
    train_limit: int | None
    test_limit: int | None


@dataclass(frozen=True)
class ImdbSpec(Run):
    model: LstmModel
    workers: int         # loader workers; 0 loads in the training process
    grad: str            # dense or sparse embedding gradients
    optimizer: Adam
    schedule: StepSchedule
    data: ImdbData

    def point(self):
        return {"batch": self.batch, "workers": self.workers, "grad": self.grad, "mode": self.mode,
                "precision": self.precision}


@dataclass(frozen=True)
class ImdbTransformerSpec(Run):
    model: TransformerModel
    workers: int         # loader workers; 0 loads in the training process
    optimizer: Adam
    schedule: StepSchedule
    data: ImdbData
    grad = "dense"       # what the LSTM's modules read (no sparse embedding here)

    def point(self):
        return {"batch": self.batch, "workers": self.workers, "mode": self.mode, "precision": self.precision}


COLUMNS = ("batch", "workers", "grad", "mode", "precision", "repeat")
TRANSFORMER_COLUMNS = ("batch", "workers", "mode", "precision", "repeat")


def runs(config, frameworks, repeats):
    """Rows {framework, batch, workers, grad, mode, precision, repeat} of the IMDB grid. Sparse embedding
    gradients are a PyTorch dimension (its nn.Embedding(sparse=True)): the others have none
    (dlbench.frameworks.NOT_APPLICABLE), so the grid gives them no sparse point (a run per repeat of
    each, recorded as not applicable in about 2 s, would say only that); a spec that asks for one is
    still stopped before its framework starts."""
    imdb = config["imdb"]
    if "lstm" not in imdb["models"]:
        return []
    return [
        {"framework": framework, "batch": batch, "workers": workers, "grad": grad, "mode": mode,
         "precision": precision, "repeat": repeat}
        for framework in frameworks
        for batch, workers, grad, mode, precision, repeat in itertools.product(
            imdb["batches"], imdb["workers"], imdb["grads"], imdb["modes"][framework], imdb["precisions"],
            range(1, repeats + 1)
        )
        if (framework, "grad", grad) not in NOT_APPLICABLE
    ]


def transformer_runs(config, frameworks, repeats):
    """Rows {framework, batch, workers, mode, precision, repeat} of the Transformer's grid: the
    LSTM's batches, workers, modes and precisions (dense embedding gradients only)."""
    imdb = config["imdb"]
    if "transformer" not in imdb["models"]:
        return []
    return [
        {"framework": framework, "batch": batch, "workers": workers, "mode": mode, "precision": precision,
         "repeat": repeat}
        for framework in frameworks
        for batch, workers, mode, precision, repeat in itertools.product(
            imdb["batches"], imdb["workers"], imdb["modes"][framework], imdb["precisions"], range(1, repeats + 1))
    ]


def _training(config, name, row, columns, threads):
    """What both IMDB models' specs share: the run's fields, the optimizer, its schedule, the data."""
    imdb = config["imdb"]
    adam = {k: imdb["optimizer"][k] for k in ("lr", "beta1", "beta2", "eps")}
    return dict(
        **run_fields(config, imdb, name, row, columns, threads, convergence_steps(imdb), batch=row["batch"]),
        workers=row["workers"], optimizer=Adam(**adam),
        schedule=StepSchedule(factor=imdb["optimizer"]["lr_factor"], every_epochs=imdb["optimizer"]["lr_step_epochs"]),
        data=ImdbData(**ARRAYS, train_limit=imdb["train_reviews"], test_limit=imdb["test_reviews"]))


def spec(config, row, threads):
    imdb = config["imdb"]
    return ImdbSpec(**_training(config, "imdb", row, COLUMNS, threads), grad=row["grad"],
                    model=LstmModel(vocabulary=imdb["vocabulary"], embedding=imdb["embedding"], hidden=imdb["hidden"],
                                    maxlen=imdb["maxlen"], classes=2))


def transformer_model(config):
    imdb, sizes = config["imdb"], config["imdb"]["transformer"]
    return TransformerModel(vocabulary=imdb["vocabulary"], width=sizes["width"], heads=sizes["heads"],
                            layers=sizes["layers"], feedforward=sizes["feedforward"], maxlen=imdb["maxlen"], classes=2)


def transformer_spec(config, row, threads):
    return ImdbTransformerSpec(**_training(config, "imdb-transformer", row, TRANSFORMER_COLUMNS, threads),
                               model=transformer_model(config))


def overhead_row(config):
    """The point benchmarks/overhead.py compares with the bare loops (benchmarks/bare/<workload>_<framework>.py)."""
    return {"batch": config["imdb"]["batches"][0], "workers": 0, "grad": "dense"}


def train_flops(spec):
    """FLOPs of one training review (dlbench.flops): at each of its maxlen steps the LSTM's gate
    products of the input and of the previous state (no gradient for the first step's state,
    zeros; the input's for the trained embedding), then the classifier. The embedding is a lookup."""
    model, gates = spec.model, 4 * spec.model.hidden
    layers = [layer for step in range(model.maxlen)
              for layer in (flops.linear(model.embedding, gates), flops.linear(model.hidden, gates, input_gradient=step > 0))]
    return flops.training([*layers, flops.linear(model.hidden, model.classes)])


def transformer_flops(spec):
    """FLOPs of one training review (dlbench.flops): in each layer, at each of the maxlen tokens, the
    query, key, value and output projections and the feed-forward block; the two attention products
    (scores, then their weighting of the values: 2 maxlen^2 width each, both operands' gradients);
    then the classifier. The embeddings are lookups; the first layer's input needs no gradient
    beyond the trained embeddings', counted as every layer's."""
    m, tokens = spec.model, spec.model.maxlen
    per_layer = [*(flops.linear(m.width, m.width) for _ in range(4)), flops.linear(m.width, m.feedforward),
                 flops.linear(m.feedforward, m.width)]
    attention = [flops.Layer(2 * tokens * tokens * m.width), flops.Layer(2 * tokens * tokens * m.width)]
    layers = [flops.Layer(layer.forward * tokens, layer.input_gradient) for layer in per_layer]
    return flops.training([*(layers + attention) * m.layers, flops.linear(m.width, m.classes)])


def draw_weights(draw, model):
    """SentimentLSTM: nn.Embedding, nn.LSTM (one layer, PyTorch's two bias vectors), nn.Linear."""
    draw.normal("embedding.weight", (model.vocabulary, model.embedding), 1.0)
    bound, gates = 1 / math.sqrt(model.hidden), 4 * model.hidden
    draw.uniform("lstm.weight_ih_l0", (gates, model.embedding), bound)
    draw.uniform("lstm.weight_hh_l0", (gates, model.hidden), bound)
    draw.uniform("lstm.bias_ih_l0", (gates,), bound)
    draw.uniform("lstm.bias_hh_l0", (gates,), bound)
    draw.linear("classifier", model.hidden, model.classes)


def draw_transformer_weights(draw, model):
    """TransformerClassifier (imdb/transformer/pytorch.py), PyTorch's default initialisation of each
    module: the embeddings N(0, 1); per layer `layers.<i>.`: norm1, attention.{query,key,value,output}
    (nn.Linear, weight (out, in)), norm2, feedforward.{0,2} (nn.Linear); then norm and classifier."""
    draw.normal("embedding.weight", (model.vocabulary, model.width), 1.0)
    draw.normal("position.weight", (model.maxlen, model.width), 1.0)
    for i in range(model.layers):
        layer = f"layers.{i}"
        draw.layer_norm(f"{layer}.norm1", model.width)
        for projection in ("query", "key", "value", "output"):
            draw.linear(f"{layer}.attention.{projection}", model.width, model.width)
        draw.layer_norm(f"{layer}.norm2", model.width)
        draw.linear(f"{layer}.feedforward.0", model.width, model.feedforward)
        draw.linear(f"{layer}.feedforward.2", model.feedforward, model.width)
    draw.layer_norm("norm", model.width)
    draw.linear("classifier", model.width, model.classes)


NOT_APPLICABLE_MODES = (
    *without_recomputing("imdb"),
    ("pytorch", "channels-last", "mode 'channels-last' is the memory format of 4-D image batches (NCHW as NHWC) for "
                                 "convolutions: an LSTM's inputs are token sequences, with no channels"))
TRANSFORMER_NOT_APPLICABLE_MODES = (
    *without_recomputing("imdb-transformer"),
    ("pytorch", "channels-last", "mode 'channels-last' is the memory format of 4-D image batches (NCHW as NHWC) for "
                                 "convolutions: a Transformer's inputs are token sequences, with no channels"))
RUN_SETS = (RunSet("imdb", ImdbSpec, COLUMNS, runs, spec, draw_weights, flops=train_flops, sample="reviews",
                   modes_not_applicable=NOT_APPLICABLE_MODES),
            RunSet("imdb-transformer", ImdbTransformerSpec, TRANSFORMER_COLUMNS, transformer_runs, transformer_spec,
                   draw_transformer_weights, flops=transformer_flops, sample="reviews",
                   modes_not_applicable=TRANSFORMER_NOT_APPLICABLE_MODES))
FIGURES = ("epoch-time", "convergence", "accuracy", "sparse-speedup", "modes", "precision")
TABLES = ("epoch-time-by-batch-and-workers",)
TARGET = ("test_accuracy", "target_accuracy")
RENAMED = {"batch_sizes": "batches"}   # a run's `batch`, one word
# What the studies read of it (dlbench.workloads says what each is)
DATA_RULES = ("prepare_imdb",)
CLAIM_TABLES = ("imdb-ratios",)
MEMORY_BATCHES = (16, 64)
EXPORTS = {"imdb-lstm": ({}, "argmax"),
           "imdb-transformer": ({}, "argmax", {"run_set": "imdb-transformer", "min_opset": (
               14, "PyTorch's ONNX exporter translates F.scaled_dot_product_attention from opset 14")})}


def check(config):
    """What the schema cannot check: the modes of each framework, batches the training reviews fill."""
    check_modes(config, "imdb")
    imdb = config["imdb"]
    sizes = imdb["transformer"]
    if sizes["width"] % sizes["heads"]:
        raise ConfigError(f"config imdb.transformer: width {sizes['width']} is not a multiple of heads "
                          f"{sizes['heads']} (each head reads width / heads of it)")
    reviews = imdb["train_reviews"] or TRAIN_REVIEWS
    for key, batch in [*(("imdb.batches", b) for b in imdb["batches"]), ("imdb.convergence_batch", imdb["convergence_batch"])]:
        check_batch(key, batch, 1, reviews, "training reviews (imdb.train_reviews)")
