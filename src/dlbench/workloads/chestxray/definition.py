"""ChestX-ray14 as the workflow knows it (pure: no framework, no data): the specs of DenseNet
training, of the framework loaders' benchmark and of the image libraries' benchmarks
(preprocessing, decoding: runs of no framework), their grids, DenseNet's initial weights, the
figures and the config checks. dlbench.workloads says what a definition holds."""
import dataclasses
from dataclasses import dataclass

from dlbench import flops
from dlbench.errors import ConfigError
from dlbench.frameworks import FRAMEWORKS
from dlbench.spec_types import Adam, Run
from dlbench.sweep import (RunSet, check_batch, check_modes, check_strategies, convergence_steps, device_strategies,
                           run_fields)

DATA = "results/data/chestxray"


@dataclass(frozen=True)
class DenseNetModel:
    classes: int
    blocks: tuple[int, ...]
    growth: int
    bottleneck: int
    compression: float
    init_features: int


DENSENET121 = DenseNetModel(classes=14, blocks=(6, 12, 24, 16), growth=32, bottleneck=4, compression=0.5,
                            init_features=64)


def densenet(blocks):
    """DenseNet-121's architecture (growth 32, bottleneck 4, compression 0.5, 64 initial
    features, 14 pathologies) with `blocks` dense layers in its four dense blocks."""
    return dataclasses.replace(DENSENET121, blocks=tuple(blocks))


def has_densenet121_architecture(model):
    """Growth, bottleneck, compression and initial features as DenseNet-121's: what the builders
    of keras.applications and the Gluon model zoo fix (any blocks, any number of classes)."""
    return dataclasses.replace(model, classes=DENSENET121.classes, blocks=DENSENET121.blocks) == DENSENET121


def densenet_name(model):
    """DenseNet-<layers>, counted as the paper counts them: the first convolution, two per
    dense layer, one per transition and the classifier (DenseNet-121 for 6-12-24-16)."""
    return f"DenseNet-{2 * sum(model.blocks) + len(model.blocks) + 1}"


@dataclass(frozen=True)
class ChestXrayData:
    labels: str          # the prepared label file (image, patient, split, 14 pathologies)
    images: str          # the manifest of the preprocessed images (image, path)
    image_source: str    # "synthetic images" or "NIH images": said in every table and figure
    size: int            # the preprocessed images are size x size
    crop: int            # random crop (training), centre crop (evaluation)


@dataclass(frozen=True)
class ChestXraySpec(Run):
    model: DenseNetModel
    input: str           # real: files through the framework's loader; synthetic: tensors in host memory,
                         # copied each step; device: the same tensors on the device, gathered there
    workers: int
    optimizer: Adam      # the learning rate is scaled by the device count, as the study did
    weights: str | None  # ImageNet weights in the framework's own format
    data: ChestXrayData

    def point(self):
        return {"input": self.input, "devices": self.devices, "nodes": self.nodes, "strategy": self.strategy,
                "mode": self.mode, "precision": self.precision}


@dataclass(frozen=True)
class ImageLibrary:
    env: str     # the environment it runs in (envs/<env>.yaml)
    reader: str  # how dlbench.workloads.chestxray.images reads and writes with it (images.READERS)


# pillow-simd replaces Pillow in the data env; stock Pillow has an env of its own.
LIBRARIES = {"pillow-simd": ImageLibrary("data", "pillow"), "pillow": ImageLibrary("pillow", "pillow"),
             "opencv": ImageLibrary("data", "opencv")}


@dataclass(frozen=True)
class ChestXrayPreprocessSpec(Run):
    """An image library resizing the source images to data.size and writing them in `format`,
    in `threads` processes (no framework)."""
    library: str
    reader: str
    format: str
    images: int          # per epoch, drawn in turn from the source images (data.images)
    data: ChestXrayData

    def point(self):
        return {"library": self.library, "format": self.format}


@dataclass(frozen=True)
class ChestXrayDecodeSpec(Run):
    """An image library decoding the preprocessed images as a loader does (crop, flip,
    normalise), in this process or `workers` worker processes (no framework)."""
    library: str
    reader: str
    format: str
    workers: int
    images: int          # per epoch, drawn in turn from the library's preprocessed images (data.images)
    data: ChestXrayData

    def point(self):
        return {"library": self.library, "format": self.format, "workers": self.workers}


@dataclass(frozen=True)
class ChestXrayLoaderSpec(Run):
    """The real-input training loader alone, no model (one device)."""
    workers: int
    images: int          # per epoch, drawn in turn from the training images
    data: ChestXrayData

    def point(self):
        return {"workers": self.workers}


COLUMNS = ("input", "devices", "nodes", "strategy", "mode", "precision", "repeat")
LOADER_COLUMNS = ("workers", "repeat")
PREPROCESS_COLUMNS = ("library", "format", "repeat")
DECODE_COLUMNS = ("library", "format", "workers", "repeat")


def runs(config, frameworks, repeats):
    """Rows {framework, input, devices, nodes, strategy, mode, precision, repeat}: real files, synthetic
    tensors copied from the host or already on the device, 1 vs N devices, on 1 or N nodes, in each of
    the framework's modes and each precision."""
    chestxray = config["chestxray"]
    return [
        {"framework": framework, "input": kind, "devices": devices, "nodes": nodes, "strategy": strategy,
         "mode": mode, "precision": precision, "repeat": repeat}
        for framework in frameworks
        for kind in chestxray["inputs"]
        for devices in chestxray["devices"]
        for nodes in chestxray["nodes"]
        for strategy in device_strategies(devices, nodes, chestxray["strategies"], framework)
        for mode in chestxray["modes"][framework]
        for precision in chestxray["precisions"]
        for repeat in range(1, repeats + 1)
    ]


def loader_runs(config, frameworks, repeats):
    """Rows {framework, workers, repeat} of the framework loaders' benchmark."""
    return [
        {"framework": framework, "workers": count, "repeat": repeat}
        for framework in frameworks
        for count in config["chestxray"]["loader"]["workers"]
        for repeat in range(1, repeats + 1)
    ]


def library_runs(config, frameworks, repeats, workers=(None,)):
    """Rows {framework None, library, format, (workers,) repeat} of an image libraries' benchmark."""
    preprocess = config["chestxray"]["preprocess"]
    return [
        {"framework": None, "library": library, "format": fmt, **({} if count is None else {"workers": count}),
         "repeat": repeat}
        for library in preprocess["libraries"]
        for fmt in preprocess["formats"]
        for count in workers
        for repeat in range(1, repeats + 1)
    ]


def decode_runs(config, frameworks, repeats):
    return library_runs(config, frameworks, repeats, config["chestxray"]["decode"]["workers"])


def data(config):
    """What ChestX-ray training and the framework loaders read: pillow-simd's preprocessed files."""
    chestxray = config["chestxray"]
    size, fmt = chestxray["preprocess"]["size"], chestxray["train_format"]
    return ChestXrayData(labels=f"{DATA}/labels.csv",
                         images=f"{DATA}/{size}/pillow-simd-{fmt}.csv",
                         image_source="synthetic images" if chestxray["images_dir"] is None else "NIH images",
                         size=size, crop=224)


def spec(config, row, threads):
    chestxray = config["chestxray"]
    return ChestXraySpec(
        **run_fields(config, chestxray, "chestxray", row, COLUMNS, threads, convergence_steps(chestxray),
                     batch=chestxray["batch"]),
        model=densenet(chestxray["blocks"]), input=row["input"], workers=chestxray["workers"],
        optimizer=Adam(**chestxray["optimizer"]), weights=chestxray["weights"][row["framework"]],
        data=data(config))


def loader_spec(config, row, threads):
    chestxray = config["chestxray"]
    return ChestXrayLoaderSpec(
        **run_fields(config, chestxray, "chestxray-loader", row, LOADER_COLUMNS, threads, batch=chestxray["batch"]),
        workers=row["workers"], images=chestxray["loader"]["images"], data=data(config))


def preprocess_spec(config, row, threads):
    chestxray = config["chestxray"]
    return ChestXrayPreprocessSpec(
        **run_fields(config, chestxray, "chestxray-preprocess", row, PREPROCESS_COLUMNS, threads,
                     batch=chestxray["batch"]),
        library=row["library"], reader=LIBRARIES[row["library"]].reader, format=row["format"],
        images=chestxray["preprocess"]["images"],
        data=dataclasses.replace(data(config), images=f"{DATA}/images.csv"))


def decode_spec(config, row, threads):
    chestxray = config["chestxray"]
    size = chestxray["preprocess"]["size"]
    return ChestXrayDecodeSpec(
        **run_fields(config, chestxray, "chestxray-decode", row, DECODE_COLUMNS, threads,
                     batch=chestxray["batch"]),
        library=row["library"], reader=LIBRARIES[row["library"]].reader, format=row["format"],
        workers=row["workers"], images=chestxray["decode"]["images"],
        data=dataclasses.replace(data(config), images=f"{DATA}/{size}/{row['library']}-{row['format']}.csv"))


def library_env(spec):
    return LIBRARIES[spec.library].env


def overhead_row(config):
    """The point benchmarks/overhead.py compares with the bare loops (benchmarks/bare/<workload>_<framework>.py)."""
    return {"input": "synthetic", "devices": 1, "nodes": 1, "strategy": "none"}


def train_flops(spec):
    """FLOPs of one training image (dlbench.flops) of DenseNet-BC at the crop: conv0 7x7 stride 2
    and a 3x3 max pool stride 2 (a quarter of the side), each dense layer's 1x1 bottleneck and
    3x3 convolution, each transition's 1x1 convolution before its 2x2 average pool, the
    classifier after the global pool; the images need no gradient."""
    model, size = spec.model, spec.data.crop // 2
    layers = [flops.conv2d(3, model.init_features, 7, size, size, input_gradient=False)]
    size = (size + 1) // 2
    features, width = model.init_features, model.bottleneck * model.growth
    for b, count in enumerate(model.blocks, start=1):
        for i in range(count):
            layers += [flops.conv2d(features + i * model.growth, width, 1, size, size),
                       flops.conv2d(width, model.growth, 3, size, size)]
        features += count * model.growth
        if b != len(model.blocks):
            out_features = int(features * model.compression)
            layers.append(flops.conv2d(features, out_features, 1, size, size))
            features, size = out_features, size // 2
    return flops.training([*layers, flops.linear(features, model.classes)])


def draw_weights(draw, model):
    """DenseNet-BC as torchvision initialises it, with its module names: features.conv0, norm0,
    denseblockB.denselayerL (norm1, conv1 1x1 to bottleneck x growth, norm2, conv2 3x3 to
    growth), transitionB (norm, conv 1x1 to features x compression), norm5; classifier (bias 0)."""
    def conv(name, c_in, c_out, kernel):
        draw.conv(name, c_in, c_out, kernel, bias=False, kaiming_normal=True)

    conv("features.conv0", 3, model.init_features, 7)
    draw.batch_norm("features.norm0", model.init_features)
    features, width = model.init_features, model.bottleneck * model.growth
    for b, layers in enumerate(model.blocks, start=1):
        for i in range(layers):
            name = f"features.denseblock{b}.denselayer{i + 1}"
            draw.batch_norm(f"{name}.norm1", features + i * model.growth)
            conv(f"{name}.conv1", features + i * model.growth, width, 1)
            draw.batch_norm(f"{name}.norm2", width)
            conv(f"{name}.conv2", width, model.growth, 3)
        features += layers * model.growth
        if b != len(model.blocks):
            out_features = int(features * model.compression)
            draw.batch_norm(f"features.transition{b}.norm", features)
            conv(f"features.transition{b}.conv", features, out_features, 1)
            features = out_features
    draw.batch_norm("features.norm5", features)
    draw.linear("classifier", features, model.classes, zero_bias=True)


RUN_SETS = (RunSet("chestxray", ChestXraySpec, COLUMNS, runs, spec, draw_weights, flops=train_flops,
                   sample="images"),
            RunSet("chestxray-loader", ChestXrayLoaderSpec, LOADER_COLUMNS, loader_runs, loader_spec, sample="images"),
            RunSet("chestxray-preprocess", ChestXrayPreprocessSpec, PREPROCESS_COLUMNS, library_runs, preprocess_spec,
                   subject="library", environment=library_env, sample="images"),
            RunSet("chestxray-decode", ChestXrayDecodeSpec, DECODE_COLUMNS, decode_runs, decode_spec,
                   subject="library", environment=library_env, sample="images"))
FIGURES = ("train-minutes", "auc", "preprocess", "loaders", "utilisation", "loss", "modes", "precision")
TABLES = ("train-minutes", "test-auc", "loader-verdict")
TARGET = None   # DenseNet learns nothing in minutes on two cores: throughput only
# One word per meaning: an image library is not a backend (the old key); `batch` is a run's batch; a run set's
# own keys are in its section (its `workers`, its `images` per epoch).
RENAMED = {"preprocess.backends": "preprocess.libraries", "batch_size": "batch", "loader_workers": "loader.workers",
           "decode_workers": "decode.workers",
           "benchmark_images": "preprocess.images, chestxray.decode.images and chestxray.loader.images"}
# An input kept on the device is `resident` (a device is what `devices` counts): an old config's
# `device` is taken as it for this release, with a warning (dlbench.config.take_renamed).
RENAMED_VALUES = {"inputs": {"device": "resident"}}
# What the studies read of it (dlbench.workloads says what each is): the memory pass searches the
# largest batch of DenseNet of memory.largest_batch.blocks; the export trains DenseNet (chestxray.blocks)
# on synthetic inputs
DATA_RULES = ("chestxray_labels", "chestxray_images", "preprocess_chestxray")
CLAIM_TABLES = ("chestxray-ratios", "chestxray-loader-verdict", "chestxray-test-auc")
MEMORY_BATCHES = (2, 8)
LARGEST_BATCH_MODEL = densenet
EXPORTS = {"densenet": ({"input": "synthetic"}, "sign")}


def check(config):
    """The strategies of each framework, the NIH label folder where the labels are NIH's, a
    split that sums to 1, a batch the training subset fills, ImageNet weights per known framework
    (filled with None for the others)."""
    check_strategies(config, "chestxray")
    check_modes(config, "chestxray")
    chestxray = config["chestxray"]
    if chestxray["labels"]["kind"] == "nih" and not chestxray["labels"]["nih_dir"]:
        raise ConfigError("config chestxray.labels.nih_dir: kind nih needs the folder of the NIH label file")
    split = chestxray["split"]
    if abs(sum(split.values()) - 1) > 1e-9:
        raise ConfigError(f"config chestxray.split: the fractions {split} sum to {sum(split.values()):g}, not 1")
    if chestxray["subset"]["train"]:
        check_batch("chestxray.batch", chestxray["batch"], max(chestxray["devices"]), chestxray["subset"]["train"],
                    "training images (chestxray.subset.train)")
    weights = chestxray["weights"]
    for framework in weights:
        if framework not in FRAMEWORKS:
            raise ConfigError(f"config chestxray.weights: unknown framework {framework!r}")
    chestxray["weights"] = {fw: weights.get(fw) for fw in FRAMEWORKS}
    given = sorted(fw for fw, path in chestxray["weights"].items() if path)
    if given and tuple(chestxray["blocks"]) != DENSENET121.blocks:
        raise ConfigError(f"config chestxray.weights ({', '.join(given)}): ImageNet weights are DenseNet-121's; "
                          f"chestxray.blocks is {chestxray['blocks']}, not {list(DENSENET121.blocks)}")
