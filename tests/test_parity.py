"""The same model in every framework, shown by its outputs: one set of weights (PyTorch's
state dict, with random batch-norm statistics) loaded into every framework gives the same
logits on a fixed batch, within a stated tolerance (the AlgoPerf modeldiffs idea)."""
import json
import subprocess

import numpy as np
import pytest

from dlbench.frameworks import FRAMEWORKS
from dlbench.specs import spec_to_json
from conftest import REPO, venv_python
from specs import smoke_spec

# (workload, grid row, inputs, tolerance, trainable parameters). Tolerances are absolute, on
# logits of order 1: float32 summation order differs between the frameworks' kernels;
# DenseNet-121 has 120 layers, and Keras' batch normalisation uses epsilon 1.001e-5 where the
# others use 1e-5.
CASES = {
    "mnist-small": ("mnist", {"model": "small"}, lambda rng: rng.standard_normal((4, 1, 28, 28), np.float32), 1e-4,
                    402_442),
    "mnist-large": ("mnist", {"model": "large"}, lambda rng: rng.standard_normal((4, 1, 28, 28), np.float32), 1e-4,
                    4_104_202),
    "imdb-lstm": ("imdb", {}, lambda rng: rng.integers(0, 5000, (4, 100)).astype(np.int64), 1e-4, 772_354),
    "densenet121": ("chestxray", {}, lambda rng: rng.standard_normal((2, 3, 224, 224), np.float32), 2e-3,
                    6_968_206),
}
# PyTorch's and MXNet's LSTMs have two bias vectors (input and recurrent), the others one: the
# documented difference of 4 x hidden (the conversion loads the sum of PyTorch's two).
TWO_BIAS_LSTM = {"pytorch", "mxnet"}
LSTM_HIDDEN = 128


def parity(framework, spec_file, inputs, out, weights_flag, weights):
    """The model's outputs and its trainable parameter count."""
    proc = subprocess.run([venv_python(framework), "-m", "dlbench.parity", str(spec_file), "--inputs", str(inputs),
                           "--out", str(out), weights_flag, str(weights)], check=True, cwd=REPO,
                          capture_output=True, text=True)
    return np.load(out), json.loads(proc.stdout.strip().splitlines()[-1])["parameters"]


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_the_same_weights_give_the_same_outputs_in_every_framework(case, tmp_path):
    workload, row, make_inputs, tolerance, parameters = CASES[case]
    rng = np.random.default_rng(0)
    np.save(tmp_path / "inputs.npy", make_inputs(rng))
    specs = {}
    for framework in FRAMEWORKS:
        specs[framework] = tmp_path / f"{framework}.json"
        specs[framework].write_text(spec_to_json(smoke_spec(workload, framework, **row)))
    parity("pytorch", specs["pytorch"], tmp_path / "inputs.npy", tmp_path / "init.npy", "--dump-weights",
           tmp_path / "init.npz")
    with np.load(tmp_path / "init.npz") as arrays:
        weights = {name: arrays[name] for name in arrays.files}
    for name, value in weights.items():  # statistics a trained network would have, not 0 and 1
        if name.endswith("running_mean"):
            weights[name] = rng.normal(0, 0.1, value.shape).astype(np.float32)
        elif name.endswith("running_var"):
            weights[name] = rng.uniform(0.5, 1.5, value.shape).astype(np.float32)
    np.savez(tmp_path / "weights.npz", **weights)
    results = {framework: parity(framework, specs[framework], tmp_path / "inputs.npy",
                                 tmp_path / f"{framework}.npy", "--weights", tmp_path / "weights.npz")
               for framework in FRAMEWORKS}
    outputs = {framework: output for framework, (output, _) in results.items()}
    for framework, (_, count) in results.items():
        one_bias = workload == "imdb" and framework not in TWO_BIAS_LSTM
        assert count == parameters - (4 * LSTM_HIDDEN if one_bias else 0), framework
    reference = outputs["pytorch"]
    assert reference.std() > 0.01, "the outputs must depend on the inputs"
    for framework, output in outputs.items():
        assert output.shape == reference.shape, framework
        difference = float(np.abs(output - reference).max())
        assert difference <= tolerance, f"{framework}: largest difference {difference:.2e} > {tolerance}"
