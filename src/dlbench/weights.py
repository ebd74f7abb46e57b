"""The same start in every framework: the initial weights, drawn once by this shared code.

`initial_weights(spec)` draws a model's weights from (spec.seed, the workload, the model's
hyperparameters) with numpy alone, so that it gives the same arrays in every framework's
environment, in PyTorch's state-dict names, order, layouts and dtypes (PyTorch's layout is the
reference that every workload module's `load_weights` converts from). The distributions are
PyTorch's default initialisation of each module:

- Conv2d and Linear: weights kaiming-uniform with a = sqrt(5), i.e. U(+-1/sqrt(fan_in)),
  biases U(+-1/sqrt(fan_in)) (fan_in: input channels x kernel height x kernel width);
- Embedding: N(0, 1);
- LSTM: every weight and bias U(+-1/sqrt(hidden));
- DenseNet-121 as torchvision initialises it (and our PyTorch module): convolutions
  kaiming-normal (N(0, 2/fan_in)), batch-norm weight 1 and bias 0, running mean 0 and
  variance 1 (num_batches_tracked 0, int64 as in PyTorch), the classifier's weight PyTorch's
  default and its bias 0.

The protocol loads them into every framework after build_model (dlbench.contract.Workload.build)
and records `weights_sha256` of them. Each workload's definition.py draws its model's arrays
(`draw_weights`) with the names of its PyTorch module: the MNIST layers of PyTorch's
nn.Sequential, the LSTM's `SentimentLSTM`, DenseNet's torchvision names derived from the spec's
DenseNetModel (blocks, growth, bottleneck, compression, initial features).
"""
import dataclasses
import hashlib
import json

import numpy as np

from dlbench.definitions import run_set


class Draw:
    """Arrays drawn in turn from one generator, kept in the order they are drawn (PyTorch's
    state-dict order)."""

    def __init__(self, rng):
        self.rng, self.arrays = rng, {}

    def uniform(self, name, shape, bound):
        self.arrays[name] = self.rng.uniform(-bound, bound, shape).astype(np.float32)

    def normal(self, name, shape, std):
        self.arrays[name] = self.rng.standard_normal(shape, dtype=np.float32) * np.float32(std)

    def constant(self, name, shape, value):
        self.arrays[name] = np.full(shape, value, dtype=np.float32)

    def linear(self, name, n_in, n_out, zero_bias=False):
        """nn.Linear's default: weight (out, in) and bias U(+-1/sqrt(in)); or a zero bias."""
        self.uniform(f"{name}.weight", (n_out, n_in), 1 / np.sqrt(n_in))
        if zero_bias:
            self.constant(f"{name}.bias", (n_out,), 0.0)
        else:
            self.uniform(f"{name}.bias", (n_out,), 1 / np.sqrt(n_in))

    def conv(self, name, c_in, c_out, kernel, bias=True, kaiming_normal=False):
        """nn.Conv2d: weight (out, in, k, k) U(+-1/sqrt(fan_in)) and bias likewise; or a
        kaiming-normal weight (nn.init.kaiming_normal_: N(0, 2/fan_in))."""
        fan_in = c_in * kernel * kernel
        shape = (c_out, c_in, kernel, kernel)
        if kaiming_normal:
            self.normal(f"{name}.weight", shape, np.sqrt(2 / fan_in))
        else:
            self.uniform(f"{name}.weight", shape, 1 / np.sqrt(fan_in))
        if bias:
            self.uniform(f"{name}.bias", (c_out,), 1 / np.sqrt(fan_in))

    def layer_norm(self, name, features):
        """nn.LayerNorm: weight 1, bias 0."""
        self.constant(f"{name}.weight", (features,), 1.0)
        self.constant(f"{name}.bias", (features,), 0.0)

    def batch_norm(self, name, features):
        """nn.BatchNorm2d: weight 1, bias 0, running mean 0, running variance 1, no batch tracked."""
        self.constant(f"{name}.weight", (features,), 1.0)
        self.constant(f"{name}.bias", (features,), 0.0)
        self.constant(f"{name}.running_mean", (features,), 0.0)
        self.constant(f"{name}.running_var", (features,), 1.0)
        self.arrays[f"{name}.num_batches_tracked"] = np.zeros((), dtype=np.int64)


def generator(spec, found):
    """The generator of a spec's initial weights, of its run set `found`: from the seed, the run set
    its runs run as and the model's hyperparameters (nothing else of the spec, so that every
    framework and sweep point of the same model starts alike; the memory pass's runs as their
    training's)."""
    key = json.dumps([found.runs_as_or_own, dataclasses.asdict(spec.model)], sort_keys=True)
    words = np.frombuffer(hashlib.sha256(key.encode()).digest(), dtype=np.uint32)
    return np.random.default_rng([spec.seed, *words.tolist()])


def initial_weights(spec):
    """{name: array} in PyTorch's state-dict names, order, layouts and dtypes (float32;
    num_batches_tracked int64), drawn by the run set's draw_weights (in the workload's
    definition.py), or None for a run set without a model (the loader benchmark)."""
    found = run_set(spec.run_set)
    if found.draw_weights is None:
        return None
    draw = Draw(generator(spec, found))
    found.draw_weights(draw, spec.model)
    return draw.arrays


def weights_sha256(weights):
    """sha256 over the names, dtypes, shapes and bytes of the arrays, in sorted name order."""
    digest = hashlib.sha256()
    for name in sorted(weights):
        array = np.ascontiguousarray(weights[name])
        digest.update(f"{name}\0{array.dtype.str}\0{array.shape}\0".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()

