"""ChestX-ray14 DenseNet (DenseNet-121's architecture, config chestxray.blocks) in Keras 3
(keras-tensorflow, keras-jax, keras-torch: the same code,
on the backend the env's KERAS_BACKEND chooses): one device, MirroredStrategy (TensorFlow),
keras.distribution.DataParallel (JAX).

The model: keras.applications' DenseNet builder (no top, global average pool) and a Dense head of 14
logits, binary cross-entropy on the logits, Adam at the base learning rate times the device
count; model.fit runs the protocol's blocks (dlbench.frameworks.keras). Input "real": a
keras.utils.PyDataset whose item i decodes the files of the run's step offset + i with PIL (the environment's
pillow-simd, as keras.utils.load_img does) and applies the shared crop, flip and normalisation
(dlbench.workloads.chestxray.images.train_transform, drawn from the seed, the epoch and the index), channels last;
`workers` Keras worker processes (none: in the training process). Input "synthetic": the task's
random tensors in memory (NHWC), each batch gathered by index % pool in the training process,
nothing decoded, no workers (as in every framework), and copied as each engine's trainer copies:
on a GPU, Keras' JAX trainer puts the next batch on the device one ahead
(_one_batch_ahead_iterator), its torch trainer converts each batch in the step (torch.as_tensor
onto the device: no overlap, Keras 3.15 offers none), keras-tensorflow's tf.data pipeline is read
by the default strategy, which copies it in the step. Input "resident" (keras-jax, keras-torch):
the same tensors and every step's indices on the device once, outside the clock (set_run),
each batch gathered there with keras.ops.take (`resident_batches`); not on keras-tensorflow,
whose trainer reads fit's input through tf.data, in host memory.
"""
from pathlib import Path

import keras
import numpy as np
from keras import layers

from dlbench.workloads.chestxray.images import eval_transform, read_image, sample_rng, train_transform
from dlbench.frameworks import keras as adapter
from dlbench.contract import OwnLoop
from dlbench.frameworks.keras.step import WorkloadMethods
from dlbench.errors import NotApplicable
from dlbench.frameworks.keras.loaders import resident_batches, run_batches
from dlbench.workloads.chestxray.definition import DENSENET121, densenet_name, has_densenet121_architecture
from dlbench.workloads.chestxray.task import ChestXray

# --- model -----------------------------------------------------------------------------------------

# Batch normalisation as PyTorch's (momentum 0.1 there: the new batch's weight; Keras' momentum is
# the old running value's weight) and epsilon 1e-5, the same in every framework.
BN_MOMENTUM, BN_EPSILON = 0.9, 1e-5


def build_model(model, crop, weights=None):
    """DenseNet of `model` (DenseNetModel: BN-ReLU-conv, bias-free convs, average-pool transitions,
    final BN + ReLU + global average pool; Keras' default initialisers, which the shared start
    replaces; batch normalisation with PyTorch's momentum and epsilon) and a Dense head of
    model.classes logits: for DenseNet-121, 6,968,206 trainable parameters with 14 classes, as
    PyTorch's; the head in float32 under a mixed policy (Keras' mixed-precision guide). weights:
    None, or a Keras weights file of the headless DenseNet-121
    (densenet121_weights_tf_dim_ordering_tf_kernels_notop.h5), which loads everything but the head."""
    from dlbench.frameworks.keras import internals

    check_model_spec(model)
    if weights is not None and not Path(weights).is_file():
        raise FileNotFoundError(f"weights file {weights} does not exist")
    backbone = internals.densenet(model.blocks, include_top=False, weights=weights, input_shape=(crop, crop, 3),
                                  pooling="avg")
    for layer in backbone.layers:
        if isinstance(layer, layers.BatchNormalization):
            # PyTorch's batch normalisation, as every framework's (keras.applications builds
            # DenseNet with epsilon 1.001e-5 and Keras' momentum 0.99); Keras reads both when
            # the layer is called (traced), so setting them on the built layers is enough.
            layer.momentum, layer.epsilon = BN_MOMENTUM, BN_EPSILON
    name = densenet_name(model).lower().replace("-", "")
    head = layers.Dense(model.classes, name="pathologies", dtype="float32")
    return keras.Model(backbone.input, head(backbone.output), name=name)


def check_model_spec(model):
    """keras.applications' builder fixes DenseNet-121's growth, bottleneck, compression and
    initial features; any four blocks, any number of classes."""
    if not has_densenet121_architecture(model):
        raise ValueError(f"keras.applications builds DenseNet-121's architecture ({DENSENET121}, any four blocks); "
                         f"the spec asks for {model}")


def keras_layer_name(module):
    """torchvision's DenseNet module name -> the keras.applications layer name (and our head)."""
    parts = module.split(".")
    if parts == ["classifier"]:
        return "pathologies"
    stem = {"conv0": "conv1_conv", "norm0": "conv1_bn", "norm5": "bn"}
    if len(parts) == 2 and parts[1] in stem:
        return stem[parts[1]]
    if len(parts) == 4 and parts[1].startswith("denseblock") and parts[2].startswith("denselayer"):
        block, layer = int(parts[1][len("denseblock"):]) + 1, int(parts[2][len("denselayer"):])
        part = {"norm1": "0_bn", "conv1": "1_conv", "norm2": "1_bn", "conv2": "2_conv"}[parts[3]]
        return f"conv{block}_block{layer}_{part}"
    if len(parts) == 3 and parts[1].startswith("transition"):
        pool, part = int(parts[1][len("transition"):]) + 1, {"norm": "bn", "conv": "conv"}[parts[2]]
        return f"pool{pool}_{part}"
    raise ValueError(f"no Keras layer for the PyTorch module {module!r}")


def load_weights(model, weights):
    """torchvision's DenseNet state dict: conv OIHW -> HWIO, BN (weight, bias, running mean,
    running variance) as Keras' (gamma, beta, moving mean, moving variance), the classifier
    (out, in) -> (in, out)."""
    modules = {}
    for name, value in weights.items():
        module, _, kind = name.rpartition(".")
        if kind != "num_batches_tracked":
            modules.setdefault(module, {})[kind] = value
    loaded = set()
    for module, values in modules.items():
        layer = model.get_layer(keras_layer_name(module))
        if isinstance(layer, layers.BatchNormalization):
            layer.set_weights([values["weight"], values["bias"], values["running_mean"], values["running_var"]])
        elif isinstance(layer, layers.Conv2D):
            layer.set_weights([values["weight"].transpose(2, 3, 1, 0)])
        else:
            layer.set_weights([values["weight"].T, values["bias"]])
        loaded.add(layer.name)
    missing = [layer.name for layer in model.layers if layer.weights and layer.name not in loaded]
    if missing:
        raise ValueError(f"no PyTorch weights for the Keras layers {missing[:5]} ({len(missing)} in all)")


def to_nhwc(images):
    return np.ascontiguousarray(images.transpose(0, 2, 3, 1))


# --- data ------------------------------------------------------------------------------------------

class TrainImages:
    """load(epoch, indices) of the real-input PyDataset: each file decoded with PIL, the shared
    crop and flip of (seed, epoch, index), normalised; float32 [B, crop, crop, 3] images and
    float32 [B, 14] labels. A plain object, so that Keras' forked workers run it as it is."""

    def __init__(self, paths, labels, seed, crop):
        self.paths, self.labels, self.seed, self.crop = paths, labels.astype(np.float32), seed, crop

    def __call__(self, epoch, indices):
        images = np.stack([train_transform(read_image(self.paths[i], "pillow"), sample_rng(self.seed, epoch, int(i)),
                                           self.crop, channels_last=True) for i in indices])
        return images, self.labels[indices]


def train_data(workload):
    """The real-input training PyDataset of a ChestX-ray workload (spec.workers Keras workers)."""
    spec = workload.spec
    load = TrainImages(workload.train_paths, workload.train_labels, spec.seed, spec.data.crop)
    return run_batches(load, spec.global_batch, spec.workers)


# --- training --------------------------------------------------------------------------------------

class KerasChestXray(WorkloadMethods, ChestXray, OwnLoop):
    inputs_to_keras = staticmethod(to_nhwc)

    @classmethod
    def check(cls, spec, device_kind):
        super().check(spec, device_kind)
        if spec.input == "resident" and spec.framework == "keras-tensorflow":
            raise NotApplicable("input resident: Keras' TensorFlow trainer reads fit's input through tf.data, whose "
                                "datasets live in host memory: it has no input of tensors on the device")

    def build_model(self):
        keras.utils.set_random_seed(self.spec.seed)
        with adapter.scope(self.placement), adapter.dtype_policy(self.applied_precision):
            self.model = build_model(self.spec.model, self.spec.data.crop, self.spec.weights)

    def build_training(self):
        classes = self.spec.model.classes
        # Binary cross-entropy on the logits: the mean over samples and findings.
        self.compile(keras.losses.BinaryCrossentropy(from_logits=True), self.learning_rate,
                     labels=np.zeros((1, classes), np.float32), outputs=np.zeros((1, classes), np.float32))
        if self.spec.input == "real":
            self.train_data = train_data(self)
            return
        images, labels = to_nhwc(self.synthetic_images), self.synthetic_labels
        del self.synthetic_images, self.synthetic_labels  # the PyDataset's copy only
        if self.spec.input == "resident":
            self.train_data = resident_batches((images, labels), self.spec.global_batch)
            return

        def load(epoch, indices):
            return images[indices % len(images)], labels[indices]

        self.train_data = run_batches(load, self.spec.global_batch, workers=0)

    def eval_inputs(self, paths):
        """The images of `paths`, decoded with PIL and centre-cropped, as NCHW float32 batches,
        in the training process (a PyDataset's workers serve fit only)."""
        crop, batch = self.spec.data.crop, self.spec.batch
        for start in range(0, len(paths), batch):
            yield np.stack([eval_transform(read_image(path, "pillow"), crop) for path in paths[start:start + batch]])

    def load_weights(self, weights):
        load_weights(self.model, weights)


WORKLOAD = KerasChestXray
