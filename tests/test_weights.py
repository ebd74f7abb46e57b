"""The shared start (dlbench.weights): the same arrays for the same spec in every framework,
PyTorch's names and default initialisation, a hash over names and bytes (how long a draw takes:
benchmarks/initial_weights.py).
tests/test_parity.py checks them against PyTorch's own state dict and loads them everywhere."""
import dataclasses
import hashlib

import numpy as np
import pytest

from dlbench.contract import Workload
from dlbench.workloads.chestxray.definition import DENSENET121, densenet, densenet_name
from dlbench.weights import initial_weights, weights_sha256
from specs import smoke_spec

PARAMETERS = {("mnist", "small"): 402_442, ("mnist", "large"): 4_104_202, ("imdb", None): 772_354,
              ("chestxray", None): 417_102}  # the smoke preset's DenseNet-21


def trainable(weights):
    return sum(v.size for k, v in weights.items() if not k.endswith(("running_mean", "running_var",
                                                                     "num_batches_tracked")))


@pytest.mark.parametrize("workload, model", PARAMETERS)
def test_the_same_spec_gives_the_same_arrays_whatever_the_framework(workload, model):
    row = {"model": model} if model else {}
    specs = [smoke_spec(workload, framework, **row) for framework in ("pytorch", "keras-jax", "mxnet")]
    first, *others = [initial_weights(spec) for spec in specs]
    assert trainable(first) == PARAMETERS[workload, model]
    assert all(v.dtype == np.float32 for k, v in first.items() if not k.endswith("num_batches_tracked"))
    for weights in others:
        assert list(weights) == list(first)
        assert all(np.array_equal(weights[k], first[k]) for k in first)
        assert weights_sha256(weights) == weights_sha256(first)
    # another seed, another start
    reseeded = initial_weights(dataclasses.replace(specs[0], seed=specs[0].seed + 1))
    assert weights_sha256(reseeded) != weights_sha256(first)


def test_the_hash_covers_names_and_bytes_in_sorted_order():
    weights = initial_weights(smoke_spec("mnist", "pytorch"))
    digest = weights_sha256(weights)
    assert weights_sha256(dict(reversed(list(weights.items())))) == digest
    changed = dict(weights)
    changed["6.bias"] = changed["6.bias"].copy()
    changed["6.bias"][0] = np.nextafter(changed["6.bias"][0], np.float32(1))
    assert weights_sha256(changed) != digest
    renamed = {("x" + k if k == "6.bias" else k): v for k, v in weights.items()}
    assert weights_sha256(renamed) != digest


def test_pytorchs_default_distributions():
    lstm = initial_weights(smoke_spec("imdb", "pytorch"))
    hidden = lstm["lstm.weight_hh_l0"].shape[1]
    assert abs(lstm["embedding.weight"].std() - 1) < 0.01  # N(0, 1)
    for name in ("lstm.weight_ih_l0", "lstm.weight_hh_l0", "lstm.bias_ih_l0", "lstm.bias_hh_l0"):
        assert np.abs(lstm[name]).max() <= 1 / np.sqrt(hidden)  # U(+-1/sqrt(hidden))
    assert np.abs(lstm["lstm.weight_ih_l0"]).max() > 0.99 / np.sqrt(hidden)
    mnist = initial_weights(smoke_spec("mnist", "pytorch"))
    for name, fan_in in (("0.weight", 9), ("0.bias", 9), ("4.weight", 6272), ("4.bias", 6272)):
        assert np.abs(mnist[name]).max() <= 1 / np.sqrt(fan_in)  # kaiming-uniform, a = sqrt(5)
    densenet = initial_weights(dataclasses.replace(smoke_spec("chestxray", "pytorch"), model=DENSENET121))
    conv = densenet["features.denseblock3.denselayer1.conv1.weight"]  # kaiming-normal, fan_in 256
    assert abs(conv.std() / np.sqrt(2 / 256) - 1) < 0.01
    assert (densenet["features.norm5.weight"] == 1).all() and (densenet["features.norm5.bias"] == 0).all()
    assert (densenet["features.norm0.running_var"] == 1).all() and (densenet["classifier.bias"] == 0).all()
    assert densenet["features.norm0.num_batches_tracked"].dtype == np.int64
    assert np.abs(densenet["classifier.weight"]).max() <= 1 / np.sqrt(1024)


def test_densenet_names_follow_the_specs_structure():
    """(How long a draw takes is a figure: benchmarks/initial_weights.py.)"""
    spec = dataclasses.replace(smoke_spec("chestxray", "pytorch"), model=DENSENET121)
    weights = initial_weights(spec)
    assert len(weights) == 727
    small = initial_weights(dataclasses.replace(
        spec, model=dataclasses.replace(DENSENET121, blocks=(2, 3), growth=8, init_features=16, classes=3)))
    convs = [k for k in small if k.endswith("conv1.weight") or k.endswith("conv.weight")]
    assert convs == ["features.denseblock1.denselayer1.conv1.weight", "features.denseblock1.denselayer2.conv1.weight",
                     "features.transition1.conv.weight", "features.denseblock2.denselayer1.conv1.weight",
                     "features.denseblock2.denselayer2.conv1.weight", "features.denseblock2.denselayer3.conv1.weight"]
    assert small["features.transition1.conv.weight"].shape == (16, 32, 1, 1)  # (16 + 2 x 8) x 0.5
    assert small["classifier.weight"].shape == (3, 16 + 3 * 8)


def test_a_densenet_is_named_by_its_layers_as_the_paper_counts_them():
    assert densenet_name(DENSENET121) == "DenseNet-121" and densenet((6, 12, 24, 16)) == DENSENET121
    assert densenet_name(densenet((2, 4, 8, 6))) == "DenseNet-45"  # the default's (config.yaml)
    assert densenet_name(densenet((6, 12, 32, 32))) == "DenseNet-169"


def test_a_workload_without_a_model_has_no_weights():
    assert initial_weights(smoke_spec("chestxray-loader", "pytorch")) is None


class Recorded(Workload):
    """A workload without a framework: what Workload.build loads, and when."""

    def load_data(self):
        self.loaded = None

    def build_model(self):
        self.model = "built"

    def load_weights(self, weights):
        self.loaded = weights

    def build_training(self):
        self.trained_from = self.loaded


def test_build_loads_the_shared_start_before_the_training_pieces_unless_imagenet_weights_are_named(tmp_path):
    spec = smoke_spec("chestxray", "mxnet")
    workload = Recorded(spec, None, None)
    workload.build()
    assert workload.trained_from is workload.loaded and list(workload.loaded) == list(initial_weights(spec))
    assert workload.initial_weights == {"source": "shared", "sha256": weights_sha256(initial_weights(spec))}
    imagenet = tmp_path / "densenet121.params"
    imagenet.write_bytes(b"ImageNet")
    workload = Recorded(dataclasses.replace(spec, weights=str(imagenet)), None, None)
    workload.build()  # build_model loads the framework's own file; nothing shared is loaded
    assert workload.trained_from is None
    assert workload.initial_weights == {"source": "imagenet", "sha256": hashlib.sha256(b"ImageNet").hexdigest()}
    loader = Recorded(smoke_spec("chestxray-loader", "mxnet"), None, None)
    loader.build()
    assert loader.trained_from is None and loader.initial_weights is None
